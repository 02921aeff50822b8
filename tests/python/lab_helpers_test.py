"""The labs' shared module (lessons/lab_helpers.py): what its timed claims say against the runs they
are given -- a side is called faster only when every run of it beat every run of the other, the
outlying tenth is set aside from ten runs on, and the sentences name the unit that suits the larger
median -- and the cache folder is made private and refused when it is not this user's.

    PYTHONPATH=build/python python3 tests/python/lab_helpers_test.py lessons/lab_helpers.py
"""
import os
import sys
import tempfile
import types

import gpulab.as_torch

gpulab.as_torch.install()  # the module imports torch, as a lab does: GPU Lab's


def load(path):
    module = types.ModuleType("lab_helpers")
    module.lab = None  # the labs' `lab`: not needed by what is tested here
    with open(path, encoding="utf-8") as f:
        exec(compile(f.read(), path, "exec"), module.__dict__)
    return module


def main():
    h = load(sys.argv[1])
    s = h.Spread.of([3.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.runs) == (2.0, 1.0, 3.0, 3), vars(s)
    ten = h.Spread.of([100.0] + [float(i) for i in range(2, 11)])  # one run met another program's burst
    assert (ten.low, ten.high) == (3.0, 10.0), vars(ten)  # a tenth set aside at each end: the burst of 100
    r = h.Spread.of([0.5, 0.25]).reciprocal(10)
    assert (r.low, r.high) == (20.0, 40.0), vars(r)  # the slowest run is the lowest rate

    fast, slow, overlapping = h.Spread.of([1.0, 1.1, 1.2]), h.Spread.of([2.0, 2.1, 2.2]), h.Spread.of([1.15, 2.05, 1.5])
    assert h.compare(fast, slow) == -1 and h.compare(slow, fast) == 1 and h.compare(fast, overlapping) == 0
    assert h.compare(h.Spread.of([1.0]), slow) == 0  # one run shows no spread
    assert h.compare_beyond_spread(h.Spread.of([1.0, 1.5]), h.Spread.of([1.55, 1.9])) == 0  # apart, but by less than a range's width
    assert h.compare_beyond_spread(fast, slow) == -1

    said = h.compared_times(fast, slow, "the loop")
    assert said.startswith("was 1.91x faster than the loop in every run") and "medians 1.1 s and 2.1 s" in said, said
    said = h.compared_times(h.Spread.of([2e-3, 2.2e-3]), h.Spread.of([1e-3, 1.1e-3]), "one copy")
    assert said.startswith("was 2x slower than one copy in every run") and "ms" in said, said
    said = h.compared_times(fast, overlapping, "it")
    assert said.startswith("showed no clear difference from it here: their runs' spreads overlap"), said
    assert "one run each shows no spread" in h.compared_times(h.Spread.of([1.0]), h.Spread.of([2.0]), "it")
    assert h.readable(12345.6) == "12346" and h.readable(0.0456) == "0.0456" and h.readable(12.34) == "12.3"
    assert h.median_index([3.0, 1.0, 2.0, 4.0]) == 2  # the lower middle of an even count

    assert h.parse_widths("256,128") == [256, 128]
    for bad in ("", "0", "a,b", "70000"):
        try:
            h.parse_widths(bad)
        except ValueError as e:
            assert "hidden" in str(e), e
        else:
            raise AssertionError(f"parse_widths({bad!r}) did not raise")

    with tempfile.TemporaryDirectory() as home:
        os.environ["XDG_CACHE_HOME"] = home
        folder = h.cache_folder()
        assert folder == os.path.join(home, "gpulab") and (os.stat(folder).st_mode & 0o777) == 0o700
        os.rmdir(folder)
        os.symlink(home, folder)  # a link planted where the folder goes is not written through
        try:
            h.cache_folder()
        except OSError as e:
            assert "not a folder of this user's" in str(e), e
        else:
            raise AssertionError("cache_folder() followed a link")
    # PyTorch 2.1's Tensor.nbytes and itemsize, which the data-parallel lab counts a replica's rows with
    # (Debian's PyTorch 1.13 has neither, so no parity case can ask it).
    import gpulab
    t = gpulab.zeros(3, 5, dtype=gpulab.float16)
    assert (t.nbytes, t.itemsize, t[1:].nbytes, gpulab.zeros(0).nbytes) == (30, 2, 20, 0), (t.nbytes, t.itemsize)
    print("lab_helpers: all checks passed")


if __name__ == "__main__":
    main()
