"""The ```python blocks of seed 002_a381e7a965d1259a.txt (../shared/seeds/), verbatim, one cell each: run in order in one
namespace, as notebook cells, by tests/python/code_cells.py. Each "# %%" line gives the outcome expected
without a GPU (as PyTorch on a machine without one) and with one GPU (GPU Lab's emulated GPU, as
PyTorch on a one-GPU machine): "ok", or the exception class raised."""

# %% cell 0: no-gpu=ok one-gpu=ok
import torch

# --- The Standard Device Setup ---
# This is the boilerplate code you should have at the top of almost every PyTorch script.

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

print("--- Part 1: Setting up the device ---")
print(f"The selected device is: {device}")

# You can also specify a particular GPU if you have more than one
# device = torch.device("cuda:0") # First GPU
# device = torch.device("cuda:1") # Second GPU

# %% cell 1: no-gpu=ok one-gpu=ok
# Create a tensor on the CPU (the default)
cpu_tensor = torch.randn(2, 3)
print(f"Original tensor device: {cpu_tensor.device}")

# Move the tensor to the selected device
gpu_tensor = cpu_tensor.to(device)
print(f"New tensor device: {gpu_tensor.device}")

# Note: If the device is already the CPU, .to("cpu") returns the original tensor
# without a copy, but it's good practice to use .to(device) everywhere for consistency.

# %% cell 2: no-gpu=ok one-gpu=ok
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# Create one tensor on the CPU and one on the GPU
tensor_cpu = torch.randn(3, 4)
tensor_gpu = torch.randn(3, 4).to(device)

print("\n--- Part 2: The Golden Rule ---")
print(f"Device of tensor_cpu: {tensor_cpu.device}")
print(f"Device of tensor_gpu: {tensor_gpu.device}")

if device.type == 'cuda':
    try:
        # This will raise a RuntimeError
        result = tensor_cpu + tensor_gpu
    except RuntimeError as e:
        print(f"\nError encountered: {e}")
        print("This error occurred because the two tensors are on different devices.")

    # The Fix: Move the CPU tensor to the GPU before the operation
    tensor_cpu_on_gpu = tensor_cpu.to(device)
    result = tensor_cpu_on_gpu + tensor_gpu
    print(f"\nSuccessfully performed the operation after moving both tensors to device: {result.device}")
else:
    print("\nSkipping device mismatch error demo as no GPU is available.")

# %% cell 3: no-gpu=ok one-gpu=ok
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import TensorDataset, DataLoader

# --- 1. Setup ---
print("\n--- Part 3: GPU-Aware Training Loop ---")
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"Training on device: {device}\n")

# --- 2. Create Dummy Data and DataLoader ---
# Let's create a simple regression dataset
num_samples = 1024
num_features = 16
X = torch.randn(num_samples, num_features)
y = torch.randn(num_samples, 1)

dataset = TensorDataset(X, y)
# num_workers can speed up data loading, pin_memory helps transfer data to GPU faster
data_loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2, pin_memory=True)

# --- 3. Define a Model and Move it to the Device ---
model = nn.Sequential(
    nn.Linear(num_features, 64),
    nn.ReLU(),
    nn.Linear(64, 1)
)

# This is the crucial step for the model.
# It moves all of the model's parameters (weights and biases) to the GPU.
model.to(device)

# --- 4. Define Loss and Optimizer ---
loss_function = nn.MSELoss()
optimizer = optim.Adam(model.parameters(), lr=0.001)

# --- 5. The Training Loop ---
num_epochs = 3
for epoch in range(num_epochs):
    model.train() # Set model to training mode

    # The loop iterates through the DataLoader
    for batch_X, batch_y in data_loader:
        # This is the crucial step for the data.
        # Move the batch of data and labels to the same device as the model.
        batch_X = batch_X.to(device)
        batch_y = batch_y.to(device)

        # Now, the rest of the training loop is standard.
        # All computations will happen on the GPU.

        # 1. Forward pass
        predictions = model(batch_X)

        # 2. Calculate loss
        loss = loss_function(predictions, batch_y)

        # 3. Backward pass and optimization
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    print(f"Epoch [{epoch+1}/{num_epochs}], Loss: {loss.item():.4f}")

print("\nTraining complete. All computations were performed on the GPU (if available).")

# %% cell 4: no-gpu=ok one-gpu=ok
print("\n--- Part 4: GPU Memory Management ---")

# --- Evaluation Loop with no_grad ---
model.eval() # Set the model to evaluation mode

total_error = 0
num_samples = 0

# This context manager is key!
with torch.no_grad():
    for batch_X, batch_y in data_loader:
        # Move data to the device
        batch_X = batch_X.to(device)
        batch_y = batch_y.to(device)

        # Get predictions
        predictions = model(batch_X)

        # No .backward() call is needed, and no gradients are computed.
        total_error += torch.abs(predictions - batch_y).sum().item()
        num_samples += batch_X.size(0)

mae = total_error / num_samples
print(f"Evaluation complete. Mean Absolute Error on the dataset: {mae:.4f}")
print("This was done using torch.no_grad() to save memory and increase speed.")
