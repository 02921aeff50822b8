"""The ```python blocks of seed 001_3209b06320ceb79a.txt (../shared/seeds/), verbatim, one cell each: run in order in one
namespace, as notebook cells, by tests/python/code_cells.py. Each "# %%" line gives the outcome expected
without a GPU (as PyTorch on a machine without one) and with one GPU (GPU Lab's emulated GPU, as
PyTorch on a one-GPU machine): "ok", or the exception class raised."""

# %% cell 0: no-gpu=ok one-gpu=ok
import torch

# Check if CUDA is available
if torch.cuda.is_available():
    device = torch.device('cuda')  # Use the GPU
    print("CUDA is available. Using GPU.")
else:
    device = torch.device('cpu')  # Fallback to CPU
    print("CUDA is not available. Using CPU.")

# %% cell 1: no-gpu=ok one-gpu=ok
# Create a tensor on the GPU
gpu_tensor = torch.randn(3, 3, device=device)
print(gpu_tensor)

# %% cell 2: no-gpu=ok one-gpu=ok
# Create a tensor on the CPU
cpu_tensor = torch.randn(3, 3)

# Move the tensor to the GPU
gpu_tensor = cpu_tensor.to(device)
# Alternatively
# gpu_tensor = cpu_tensor.cuda()

# %% cell 3: no-gpu=ok one-gpu=ok
model = MyModel()  # Replace with your model class
model.to(device)   # Move the model to the GPU

# The seed says cpu_tensor + gpu_tensor transfers cpu_tensor: PyTorch raises the same-device error instead.
# %% cell 4: no-gpu=ok one-gpu=RuntimeError
# Bad Practice
result = cpu_tensor + gpu_tensor  # Transfers cpu_tensor to GPU

# Good Practice
result = gpu_tensor + gpu_tensor  # Both tensors are on the GPU

# %% cell 5: no-gpu=ok one-gpu=ok
# Assuming `data_loader` yields batches of data
for inputs, labels in data_loader:
    inputs, labels = inputs.to(device), labels.to(device)
    outputs = model(inputs)
    loss = loss_function(outputs, labels)

# %% cell 6: no-gpu=ok one-gpu=ok
# Release unused tensors
del tensor  # Remove reference to tensor
torch.cuda.empty_cache()  # Clear GPU memory cache

# %% cell 7: no-gpu=ok one-gpu=ok
# Use the profiler to monitor GPU usage
with torch.profiler.profile() as prof:
    # Your training loop or model evaluation code
    pass

print(prof.key_averages().table(sort_by="cuda_time_total"))

# The seed never makes an optimizer for the model of cell 3: the prelude's holds the parameters of
# an earlier model, which got no gradients, and PyTorch's GradScaler.step says "No inf checks were
# recorded for this optimizer." (without CUDA the GradScaler is disabled, and step() simply steps).
# %% cell 8: no-gpu=ok one-gpu=AssertionError
# Initialize the scaler
scaler = torch.cuda.amp.GradScaler()

for inputs, labels in data_loader:
    inputs, labels = inputs.to(device), labels.to(device)

    with torch.cuda.amp.autocast():  # Automatically use mixed precision
        outputs = model(inputs)
        loss = loss_function(outputs, labels)

    scaler.scale(loss).backward()  # Scale the loss
    scaler.step(optimizer)          # Update weights
    scaler.update()                 # Update the scale for next iteration
