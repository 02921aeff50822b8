"""torch.amp: autocast regions and the GradScaler, over the engine's (engine/amp/)."""
import warnings

from .. import _C

Tensor = _C.Tensor


class autocast:
    """``with torch.autocast("cuda", dtype=torch.float16):``: inside, the matrix products run in the
    lower precision and the ops that need range or accumulation in float32, by PyTorch's lists. Also a
    decorator."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = enabled
        self._region = _C._AutocastRegion(device_type, dtype, enabled)

    def __enter__(self):
        self._region.enter()
        return self

    def __exit__(self, *exc):
        self._region.exit()
        return False

    def __call__(self, function):
        import functools

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled):
                return function(*args, **kwargs)

        return wrapper


class GradScaler:
    """Scales the loss before backward so that float16 gradients do not underflow, unscales them before
    the optimizer's step, skips a step whose gradients hold inf or NaN and adapts the scale: the
    engine's GradScaler, which takes an optimizer's parameter groups (one engine optimizer each)
    together."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, enabled=True):
        if enabled and device == "cuda" and not _C._cuda_device_count():
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.")
            enabled = False
        self._enabled = enabled
        self._engine = _C._GradScaler(float(init_scale), float(growth_factor), float(backoff_factor), int(growth_interval), bool(enabled))

    def scale(self, outputs):
        if isinstance(outputs, Tensor):
            return self._engine.scale(outputs)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    @staticmethod
    def _engine_optimizers(optimizer):
        """The optimizer's engine optimizers, one per parameter group, each with its group's current lr."""
        engines = []
        for index, group in enumerate(optimizer.param_groups):
            engine = optimizer._engine(index)
            engine.set_lr(float(group["lr"]))
            engines.append(engine)
        return engines

    def unscale_(self, optimizer):
        if self._enabled:
            self._engine.unscale_(self._engine_optimizers(optimizer))

    def step(self, optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if args or kwargs:
            raise NotImplementedError("GPU Lab's torch has no GradScaler.step with a closure yet")
        try:
            self._engine.step(self._engine_optimizers(optimizer))
        except RuntimeError as e:
            if "No inf checks were recorded" in str(e):
                raise AssertionError(str(e)) from None  # PyTorch's class for it: an assert in GradScaler.step
            raise
        return None

    def update(self, new_scale=None):
        if new_scale is not None and isinstance(new_scale, Tensor):
            new_scale = new_scale.item()
        self._engine.update(new_scale)

    def get_scale(self):
        return self._engine.get_scale() if self._enabled else 1.0

    def get_growth_tracker(self):
        return self._engine.get_growth_tracker()

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        return {"scale": self.get_scale(), "_growth_tracker": self.get_growth_tracker()} if self._enabled else {}

    def load_state_dict(self, state_dict):
        if self._enabled and "scale" in state_dict:
            self._engine.update(float(state_dict["scale"]))
