"""torch.Size: a tuple of ints that prints as PyTorch prints a shape."""


class Size(tuple):
    """The shape of a tensor: ``torch.Size([64, 16])``."""

    def __repr__(self):
        return "torch.Size([" + ", ".join(str(n) for n in self) + "])"

    __str__ = __repr__

    def numel(self):
        count = 1
        for n in self:
            count *= n
        return count

    def __getitem__(self, index):
        item = tuple.__getitem__(self, index)
        return Size(item) if isinstance(index, slice) else item

    def __add__(self, other):
        return Size(tuple(self) + tuple(other))
