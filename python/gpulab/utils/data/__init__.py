"""torch.utils.data: Dataset, TensorDataset, random_split and DataLoader.

A DataLoader over a TensorDataset of two tensors (inputs, targets) -- the lessons' and the seeds'
case -- is the engine's: it gathers each batch in C++ (on its worker threads with num_workers > 0,
into pinned memory with pin_memory=True) and never needs the GIL. Any other dataset (a Dataset
written in Python) is read in Python, one example at a time, and collated with torch.stack, as
PyTorch does. Its num_workers > 0 are threads, not PyTorch's processes: they build the next batches
while the loop trains, but Python code runs one thread at a time (the GIL), so a __getitem__ that
computes in Python gains little; one that waits (files) or calls the engine (which releases the GIL)
gains as with processes, without their start-up cost or copies.
"""
import concurrent.futures
import collections.abc
import random
import threading

from ... import _C

Tensor = _C.Tensor


class Dataset:
    """A map-style dataset: subclass it with __getitem__(index) and __len__()."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        raise NotImplementedError("GPU Lab's torch has no ConcatDataset yet")


class TensorDataset(Dataset):
    """Examples are the rows of the given tensors (the same first dimension)."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    total = len(dataset)
    if all(isinstance(n, float) for n in lengths) and abs(sum(lengths) - 1) < 1e-9:
        counts = [int(total * f) for f in lengths]
        for i in range(total - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != total:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = list(range(total))
    random.Random(_C.randint(0, 2 ** 62, (1,)).item()).shuffle(order)
    out, start = [], 0
    for n in lengths:
        out.append(Subset(dataset, order[start:start + n]))
        start += n
    return out


def default_collate(batch):
    first = batch[0]
    if isinstance(first, Tensor):
        return _C.stack(list(batch))
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return _C.tensor(list(batch))
    if isinstance(first, collections.abc.Mapping):
        return {key: default_collate([b[key] for b in batch]) for key in first}
    if isinstance(first, (tuple, list)):
        return [default_collate(list(items)) for items in zip(*batch)]
    return batch


class DataLoader:
    """Batches of a dataset: ``for x, y in DataLoader(ds, batch_size=64, shuffle=True): ...``."""

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None, num_workers=0, collate_fn=None,
                 pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None, generator=None, *, prefetch_factor=None,
                 persistent_workers=False, pin_memory_device=""):
        if batch_size is None or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        if sampler is not None or batch_sampler is not None:
            raise NotImplementedError("GPU Lab's torch has no DataLoader(sampler=...) yet: use shuffle=True or False")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.num_workers, self.pin_memory, self.collate_fn = num_workers, pin_memory, collate_fn or default_collate
        self._engine = None
        if collate_fn is None and isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
            inputs, targets = dataset.tensors
            if not inputs.is_cuda and not targets.is_cuda:
                seed = _C.randint(0, 2 ** 62, (1,)).item()
                self._engine = _C._TensorLoader(inputs.contiguous(), targets.contiguous(), batch_size, shuffle, drop_last, num_workers,
                                                pin_memory, seed)

    def __len__(self):
        if self._engine is not None:
            return len(self._engine)
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        if self._engine is not None:
            return iter(self._engine)  # shared by threads safely too (python/bindings/data_bindings.cpp)
        return _SharedIterator(self._python_batches(), len(self))

    def _python_batches(self):
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(_C.randint(0, 2 ** 62, (1,)).item()).shuffle(order)
        batches = [order[start:start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()

        def build(indices):
            # A data set with __getitems__ is handed the batch's indices at once, as PyTorch 2's fetcher does.
            getitems = getattr(self.dataset, "__getitems__", None)
            batch = self.collate_fn(getitems(indices) if getitems else [self.dataset[i] for i in indices])
            return _pinned(batch) if self.pin_memory else batch

        if self.num_workers == 0:
            for indices in batches:
                yield build(indices)
            return
        # Worker threads build batches ahead (2 per worker, as PyTorch's prefetch_factor), handed out in order.
        with concurrent.futures.ThreadPoolExecutor(self.num_workers, thread_name_prefix="DataLoader worker") as pool:
            ahead = 2 * self.num_workers
            pending = [pool.submit(build, indices) for indices in batches[:ahead]]
            for i in range(len(batches)):
                batch = pending[i].result()
                if i + ahead < len(batches):
                    pending.append(pool.submit(build, batches[i + ahead]))
                pending[i] = None
                yield batch


class _SharedIterator:
    """One epoch of a DataLoader over a Python dataset. Threads may share it: it hands each batch to
    exactly one of the threads that call next() on it, as PyTorch's single-process iterator does as a
    rule -- the generator below it alone raised "generator already executing" in the threads that came
    second (PyTorch's sampler, a generator too, can: tests/python/dataloader_threads.py)."""

    def __init__(self, batches, length):
        self._batches, self._length = batches, length
        self._lock = threading.Lock()

    def __iter__(self):
        return self

    def __next__(self):
        with self._lock:
            return next(self._batches)

    def __len__(self):
        return self._length


def _pinned(batch):
    if isinstance(batch, Tensor):
        return batch.pin_memory() if _C._cuda_device_count() > 0 else batch
    if isinstance(batch, (list, tuple)):  # a tuple comes back a list, as PyTorch's pin_memory gives it
        return [_pinned(b) for b in batch]
    if isinstance(batch, dict):
        return {k: _pinned(v) for k, v in batch.items()}
    return batch
