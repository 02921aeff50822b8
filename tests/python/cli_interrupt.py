"""gpulab-cli run stops cleanly on Ctrl+C: a script in an endless loop of engine work, sent SIGINT once it
has started, exits within 5 s with status 130 (128 + SIGINT) and Python's KeyboardInterrupt
traceback, which shows the script's frames and not the runner's.

Usage: cli_interrupt.py GPULAB_CLI SCRIPT"""
import signal
import subprocess
import sys
import time


def main(cli, script):
    # SIGINT as a terminal would deliver it, whatever the caller ignores.
    proc = subprocess.Popen([cli, "run", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stdout.readline().strip()
    if first != "started":
        proc.kill()
        print("the script did not start:", first, proc.stderr.read())
        return 1
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        print("still running 5 s after Ctrl+C")
        return 1
    took = time.monotonic() - sent
    status = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    print(f"exit status {status} after {took:.2f} s")
    if status != 130:
        print(err)
        return 1
    if "KeyboardInterrupt" not in err or script.split("/")[-1] not in err or "runpy" in err:
        print("unexpected traceback:\n" + err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
