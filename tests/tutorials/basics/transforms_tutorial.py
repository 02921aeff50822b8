# Source: https://github.com/pytorch/tutorials  beginner_source/basics/transforms_tutorial.py
# Version read: commit 04deff56f6db9f3446e45f2a7cb13cc2134632e4
# GPU Lab corpus: the tutorial's code is kept as written; its reStructuredText prose comments are
# abridged, and every other change is marked with a "GPU Lab corpus:" comment.
"""
Transforms
===================
"""

# GPU Lab corpus: torchvision (FashionMNIST download) is not used; the stand-ins below give
# random 1x28x28 float images in [0, 1) with int labels 0..9 (640 samples); ToTensor is the
# identity and Lambda applies its function. `import torch` is added: this version of the tutorial
# uses torch in its lambdas without importing it, and the stand-in dataset needs it.
import torch
import types
class _FashionMNIST(torch.utils.data.Dataset):
    def __init__(self, root, train=True, download=False, transform=None, target_transform=None):
        n = 640 if train else 320
        self.images = torch.rand(n, 1, 28, 28)
        self.labels = torch.randint(0, 10, (n,)).tolist()
        self.transform, self.target_transform = transform, target_transform
    def __len__(self):
        return len(self.labels)
    def __getitem__(self, idx):
        img, label = self.images[idx], self.labels[idx]
        if self.transform:
            img = self.transform(img)
        if self.target_transform:
            label = self.target_transform(label)
        return img, label
datasets = types.SimpleNamespace(FashionMNIST=_FashionMNIST)
ToTensor = lambda: (lambda x: x)
Lambda = lambda f: f

ds = datasets.FashionMNIST(
    root="data",
    train=True,
    download=True,
    transform=ToTensor(),
    target_transform=Lambda(lambda y: torch.zeros(10, dtype=torch.float).scatter_(0, torch.tensor(y), value=1))
)

target_transform = Lambda(lambda y: torch.zeros(
    10, dtype=torch.float).scatter_(dim=0, index=torch.tensor(y), value=1))
