"""torch.optim.Optimizer: parameter groups and the calls every optimizer shares."""
from .. import _C
from .._grad_mode import enable_grad, no_grad

Tensor = _C.Tensor


class Optimizer:
    """The base of SGD, Adam and AdamW. A subclass names the engine optimizer of a group
    (_engine_optimizer) and the hyperparameters that engine optimizer keeps for its life (_fixed):
    those may not change after the first step, while lr may change at any time."""

    _fixed = ()

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.param_groups = []
        self._engines = []  # per group: (engine optimizer, the fixed hyperparameters it was built with)
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, but got " +
                            type(params).__name__)
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group):
        group = dict(param_group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is " + type(p).__name__)
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)
        self._engines.append(None)

    def _engine(self, index):
        group = self.param_groups[index]
        fixed = tuple(group[k] for k in self._fixed)
        entry = self._engines[index]
        if entry is None:
            entry = (self._engine_optimizer(group), fixed)
            self._engines[index] = entry
        elif entry[1] != fixed:
            changed = [k for k, old, new in zip(self._fixed, entry[1], fixed) if old != new]
            raise NotImplementedError(f"GPU Lab's torch cannot change {', '.join(changed)} of a parameter group after its first "
                                      "step yet (lr can change at any time)")
        return entry[0]

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for index, group in enumerate(self.param_groups):
            engine = self._engine(index)
            engine.set_lr(float(group["lr"]))
            engine.step()
        return loss

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    with no_grad():
                        p.grad.zero_()

    def _stepped(self):
        """(global index, parameter, its state as a dict) for every parameter the engine optimizers keep
        state for, the global index counting through the groups as state_dict numbers them."""
        index = 0
        for number, group in enumerate(self.param_groups):
            entry = self._engines[number]
            for local, p in enumerate(group["params"]):
                state = entry[0].state(local) if entry is not None else []
                if state:
                    yield index + local, p, dict(state)
            index += len(group["params"])

    @property
    def state(self):
        """Per parameter its state (exp_avg, momentum_buffer, ...), the engine optimizers' own tensors."""
        return {p: state for _, p, state in self._stepped()}

    def state_dict(self):
        groups = []
        index = 0
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = list(range(index, index + len(group["params"])))
            index += len(group["params"])
            groups.append(packed)
        return {"state": {i: state for i, _, state in self._stepped()}, "param_groups": groups}

    def load_state_dict(self, state_dict):
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, saved in zip(self.param_groups, groups):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of optimizer's group")
            for key, value in saved.items():
                if key != "params":
                    mine[key] = value
        # Each saved parameter's state into its group's engine optimizer, copied to the parameter's
        # device and dtype there (a checkpoint saved on a GPU loads on the CPU).
        where = {}
        for number, (mine, saved) in enumerate(zip(self.param_groups, groups)):
            for local, saved_index in enumerate(saved["params"]):
                where[saved_index] = (number, local)
        for saved_index, state in state_dict["state"].items():
            if saved_index not in where:
                raise ValueError(f"loaded state dict has state for parameter {saved_index}, which no parameter group names")
            number, local = where[saved_index]
            self._engine(number).set_state(local, list(state.items()))

    def __repr__(self):
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += "\nParameter Group {}".format(i)
            for key in sorted(group):
                if key != "params":
                    text += "\n    {}: {}".format(key, group[key])
        return text + "\n)"
