"""torch.profiler over the engine's profiler: what each op cost on the CPU and on the device, as a
table (key_averages().table) and as a Chrome trace that Perfetto and Holistic Trace Analysis read."""
import enum

from .. import _C


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1


class profile:
    """``with torch.profiler.profile() as prof: ...`` then ``prof.key_averages().table(sort_by=...)``."""

    def __init__(self, activities=None, schedule=None, on_trace_ready=None, record_shapes=False, profile_memory=False,
                 with_stack=False, with_flops=False, with_modules=False, experimental_config=None, use_cuda=None):
        if schedule is not None:
            raise NotImplementedError("GPU Lab's torch has no torch.profiler.schedule yet: profile the steps you run inside the block")
        self.on_trace_ready = on_trace_ready
        self._record_shapes, self._profile_memory = record_shapes, profile_memory
        self._engine = None

    def __enter__(self):
        self._engine = _C._Profile(self._record_shapes, self._profile_memory)
        return self

    def __exit__(self, *exc):
        self._engine.stop()
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)
        return False

    def step(self):
        self._engine.step()

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        return self._engine.key_averages(group_by_input_shape)

    def export_chrome_trace(self, path):
        self._engine.export_chrome_trace(str(path))


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.profiler", name)
