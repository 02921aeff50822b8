"""Parity cases: arguments that GPU Lab's torch once accepted and ignored (issue 48, section 2.6) -- the
profiler's activities and options, an empty profile's table, torch.distributed's checks before a process
group, and use_deterministic_algorithms' warn_only. What only GPU Lab can show (a CUDA device's column
on the emulated GPU, the memory history's context) is in tests/python/arguments_test.py."""
import datetime

OPTIONS = {
    # PyTorch records stacks and FLOPs; GPU Lab's profiler cannot, and says so rather than leaving them out.
    "profile_with_stack_is_refused": {"ours": ("error", "NotImplementedError", None), "message": False},
    "profile_with_flops_is_refused": {"ours": ("error", "NotImplementedError", None), "message": False},
    # 1.13 reaches the profiler's start with no activity left on a CPU-only machine (AssertionError);
    # GPU Lab refuses a profile without the CPU when it is made.
    "profile_without_the_cpu_is_refused": {"ours": ("error", "NotImplementedError", None), "message": False},
    # PyTorch 2.x raises TypeError with the value (1.13: RuntimeError, "of typedatetime.timedelta").
    "init_process_group_checks_the_timeout": {
        "ours": ("error", "TypeError", "Expected timeout argument to be of type datetime.timedelta, got 5")},
    # 2.x's words ("Backend constructor parameter must be string-ish"); 1.13's differ.
    "init_process_group_checks_the_backend": {"message": False},
    # The class and words of PyTorch's argument parser, less its "(position 1)".
    "use_deterministic_algorithms_takes_a_bool": {"message": False},
}


def case_an_empty_profile_has_an_empty_table(torch):
    with torch.profiler.profile() as prof:
        pass
    return [prof.key_averages().table(), str(prof.key_averages())]


def case_a_cpu_only_profile_has_no_cuda_columns(torch):
    activity = torch.profiler.ProfilerActivity
    with torch.profiler.profile(activities=[activity.CPU]) as prof:
        (torch.ones(8, 8) @ torch.ones(8, 8)).sum()
    table = prof.key_averages().table(sort_by="cpu_time_total")
    return ["aten::mm" in table or "aten::matmul" in table, "CUDA" in table]


def case_profile_takes_its_arguments_by_keyword(torch):
    return torch.profiler.profile([torch.profiler.ProfilerActivity.CPU])


def case_profile_with_stack_is_refused(torch):
    with torch.profiler.profile(with_stack=True):
        pass
    return "recorded"


def case_profile_with_flops_is_refused(torch):
    with torch.profiler.profile(with_flops=True):
        pass
    return "recorded"


def case_profile_without_the_cpu_is_refused(torch):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        pass
    return "recorded"


def case_init_process_group_needs_the_rendezvous_variables(torch):
    torch.distributed.init_process_group(backend="gloo")


def case_init_process_group_checks_the_timeout(torch):
    torch.distributed.init_process_group(backend="gloo", timeout=5)


def case_init_process_group_checks_the_backend(torch):
    torch.distributed.init_process_group(backend=5, timeout=datetime.timedelta(seconds=5))


def _deterministic_state(torch):
    return [torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.get_deterministic_debug_mode(), torch.backends.cudnn.deterministic]


def case_use_deterministic_algorithms_keeps_warn_only(torch):
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        on = _deterministic_state(torch)
        torch.use_deterministic_algorithms(False, warn_only=True)  # warn_only is kept with mode False too
        off = _deterministic_state(torch)
        torch.set_deterministic_debug_mode("error")
        error = _deterministic_state(torch)
    finally:
        torch.use_deterministic_algorithms(False)
    return [on, off, error, _deterministic_state(torch)]


def case_use_deterministic_algorithms_takes_a_bool(torch):
    torch.use_deterministic_algorithms(1)


def case_deterministic_debug_mode_checks_its_value(torch):
    outcomes = []
    for mode in ("bogus", 5, 1.0):
        try:
            torch.set_deterministic_debug_mode(mode)
            outcomes.append("set")
        except (RuntimeError, TypeError) as e:
            outcomes.append((type(e).__name__, str(e)))
    torch.use_deterministic_algorithms(False)
    return outcomes
