"""torch.profiler over the engine's profiler: what each op cost on the CPU and on the device, as a
table (key_averages().table) and as a Chrome trace that Perfetto and Holistic Trace Analysis read."""
import enum

from .. import _C


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1


def supported_activities():
    """The activities this profiler records: the CPU's ops, and the device time of those that run on a
    CUDA device (real or emulated)."""
    return {ProfilerActivity.CPU, ProfilerActivity.CUDA}


class profile:
    """``with torch.profiler.profile() as prof: ...`` then ``prof.key_averages().table(sort_by=...)``.

    activities: as PyTorch's, a CUDA device's time is recorded only with ProfilerActivity.CUDA (the
    default records both); GPU Lab records ops on the CPU, so ProfilerActivity.CPU must be among them.
    What GPU Lab's profiler cannot record (stacks, FLOPs, modules, a schedule) raises
    NotImplementedError naming the argument, rather than giving a profile without it."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False, profile_memory=False,
                 with_stack=False, with_flops=False, with_modules=False, experimental_config=None, use_cuda=None):
        import warnings

        activities = set(activities) if activities else supported_activities()
        for activity in activities:
            if not isinstance(activity, ProfilerActivity):
                raise TypeError(f"torch.profiler.profile(activities=...): expected ProfilerActivity values, got {activity!r}")
        if use_cuda is not None:
            warnings.warn("`use_cuda` is deprecated, use `activities` argument instead", FutureWarning, stacklevel=2)
            if use_cuda:
                activities.add(ProfilerActivity.CUDA)
            else:
                activities.discard(ProfilerActivity.CUDA)
        if ProfilerActivity.CPU not in activities:
            raise NotImplementedError("torch.profiler.profile(activities=...) without ProfilerActivity.CPU: GPU Lab's profiler "
                                      "records each op on the CPU, with its device time beside it")
        unsupported = {"schedule": schedule is not None, "with_stack": with_stack, "with_flops": with_flops,
                       "with_modules": with_modules, "experimental_config": experimental_config is not None}
        for name, given in unsupported.items():
            if given:
                raise NotImplementedError(f"torch.profiler.profile({name}=...): GPU Lab's profiler does not record this yet"
                                          + (" (profile the steps you run inside the block)" if name == "schedule" else ""))
        self.activities = activities
        self.on_trace_ready = on_trace_ready
        self._record_shapes, self._profile_memory = bool(record_shapes), bool(profile_memory)
        self._engine = None

    def __enter__(self):
        self._engine = _C._Profile(self._record_shapes, self._profile_memory, ProfilerActivity.CUDA in self.activities)
        return self

    def __exit__(self, *exc):
        self._engine.stop()
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)
        return False

    def step(self):
        self._engine.step()

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        # group_by_stack_n groups by each event's stack; without with_stack (which GPU Lab's profiler
        # cannot record) PyTorch's events have no stack, so the grouping is the same as without it.
        return self._engine.key_averages(group_by_input_shape)

    def export_chrome_trace(self, path):
        self._engine.export_chrome_trace(str(path))


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.profiler", name)
