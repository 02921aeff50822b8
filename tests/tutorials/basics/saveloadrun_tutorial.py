# Source: https://github.com/pytorch/tutorials  beginner_source/basics/saveloadrun_tutorial.py
# Version read: commit 07a339ece661a2b304b8834780470f522eed1e02
# GPU Lab corpus: the tutorial's code is kept as written; its reStructuredText prose comments are
# abridged, and every other change is marked with a "GPU Lab corpus:" comment.
"""
Save and Load the Model
============================
"""

import torch
import torch.onnx as onnx
# GPU Lab corpus: torchvision.models is not used (vgg16 pretrained weights are a download, and
# VGG16 is too big to run fast). `models.vgg16` below is a small stand-in with VGG's layout
# (features / avgpool / classifier, Conv2d-ReLU-MaxPool, Dropout) taking 1x3x224x224 input;
# `pretrained` is accepted and ignored.
import types
from torch import nn
class _VGG(nn.Module):
    def __init__(self, pretrained=False):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(4, 8, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2))
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(8 * 7 * 7, 32), nn.ReLU(True), nn.Dropout(),
            nn.Linear(32, 1000))
    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)
models = types.SimpleNamespace(vgg16=_VGG)
# GPU Lab corpus: files the tutorial writes go to a temporary directory.
import os, tempfile
os.chdir(tempfile.mkdtemp())

model = models.vgg16(pretrained=True)
torch.save(model.state_dict(), 'model_weights.pth')

model = models.vgg16() # we do not specify pretrained=True, i.e. do not load default weights
model.load_state_dict(torch.load('model_weights.pth'))
model.eval()

torch.save(model, 'model.pth')

model = torch.load('model.pth')

input_image = torch.zeros((1,3,224,224))
onnx.export(model, input_image, 'model.onnx')
