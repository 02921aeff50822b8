"""python3 -m gpulab [--emulated-gpu] SCRIPT.py [ARGS...]: runs a PyTorch script with ``import torch``
giving GPU Lab's torch; --emulated-gpu makes GPU Lab's emulated GPU cuda:0 when no real GPU is usable."""
import os
import runpy
import signal
import sys
import traceback


def main(argv):
    args = list(argv)
    if args and args[0] == "--emulated-gpu":
        os.environ["GPULAB_EMULATED_GPU"] = "1"
        args.pop(0)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    from gpulab import _C, as_torch

    # OpenBLAS chooses its kernels when it loads, and takes generic ones on CPUs newer than its table;
    # OPENBLAS_CORETYPE overrides that only before it loads: run again, once, with the better ones
    # (as GPU Lab's programs do, engine/runtime/blas_kernels.h).
    core = _C._better_blas_core()
    if core and "OPENBLAS_CORETYPE" not in os.environ:
        os.environ["OPENBLAS_CORETYPE"] = core
        os.execv(sys.executable, [sys.executable, "-m", "gpulab"] + list(argv))

    as_torch.install()
    sys.argv = args
    script = os.path.abspath(args[0])
    sys.path.insert(0, os.path.dirname(script))  # as `python3 script.py` puts the script's folder first
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise  # the script's sys.exit(n)
    except KeyboardInterrupt as e:
        # Ctrl+C: the traceback, then death by SIGINT as Python's own (the shell's status 130).
        _print_traceback(e, script)
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException as e:  # noqa: BLE001 - reported as Python reports an uncaught exception
        _print_traceback(e, script)
        return 1
    return 0


def _print_traceback(error, script):
    """The traceback as `python3 script.py` prints it: from the script's first frame on, without
    this runner's frames."""
    tb = error.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb if tb is not None else error.__traceback__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
