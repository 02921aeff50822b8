"""A Dataset with __getitems__ is handed each batch's indices at once (PyTorch 2's fetcher,
torch/utils/data/_utils/fetch.py: "if hasattr(self.dataset, '__getitems__') and
self.dataset.__getitems__"), on the loop's thread and on worker threads alike, and what it returns goes
to collate_fn as it is; a batch that is a tuple comes back from pin_memory=True a list, as PyTorch's
pin_memory gives it. The feeding lesson's lab decodes its batches this way (lessons/12-feeding-the-gpu).
PyTorch 1.13 (Debian's, the parity reference) has no __getitems__, so this is checked here, not by the
parity cases.

    PYTHONPATH=build/python python3 tests/python/dataset_getitems.py
"""
import threading

import gpulab as torch
from gpulab.utils.data import DataLoader, Dataset


class Batched(Dataset):
    def __init__(self):
        self.calls, self.lock = [], threading.Lock()

    def __len__(self):
        return 10

    def __getitem__(self, i):
        raise AssertionError("__getitem__ called: the loader should have used __getitems__")

    def __getitems__(self, indices):
        with self.lock:
            self.calls.append(list(indices))
        return torch.tensor([float(i) for i in indices]), torch.tensor(list(indices))


def main():
    for workers in (0, 2):
        ds = Batched()
        batches = list(DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=lambda b: b))
        assert sorted(map(tuple, ds.calls)) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)], ds.calls
        assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert all(isinstance(b, tuple) for b in batches)
    if torch.cuda.is_available():
        pinned = list(DataLoader(Batched(), batch_size=5, pin_memory=True, collate_fn=lambda b: b))
        assert all(isinstance(b, list) and all(t.is_pinned() for t in b) for b in pinned), pinned
    print("ok: __getitems__ gets each batch's indices, with 0 and 2 workers; pinned tuples come back lists")


if __name__ == "__main__":
    main()
