# Source: https://github.com/pytorch/examples  time_sequence_prediction/train.py
# Version read: commit 04b1f3cec923d40972d998a7ed3c00c1b37e765e
# GPU Lab corpus: changes are marked with "GPU Lab corpus:" comments.
from __future__ import print_function
import argparse
import torch
import torch.nn as nn
import torch.optim as optim
import numpy as np
# GPU Lab corpus: matplotlib is not installed; `plt` below draws and saves nothing.
class _Plt:
    def __getattr__(self, name):
        return lambda *a, **k: None
plt = _Plt()

class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)
        self.dummy_param = nn.Parameter(torch.empty(0))

    def forward(self, input, future = 0):
        outputs = []
        device = self.dummy_param.device
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):# if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    # GPU Lab corpus: default 1 step instead of 15, to run fast.
    parser.add_argument('--steps', type=int, default=1, help='steps to run')
    # GPU Lab corpus: default device is 'cuda' only where CUDA is available ('cpu' otherwise), so
    # that the script runs with no arguments (the original exits with "cuda is not available").
    parser.add_argument('--device', type=str, default='cuda' if torch.cuda.is_available() else 'cpu', help='training device. cuda, mps, or cpu.')
    opt = parser.parse_args()
    # training device
    device_name = opt.device
    if device_name == 'cuda' and not torch.cuda.is_available():
        print('cuda is not available')
        exit(-1)
    elif device_name == 'mps' and not torch.backends.mps.is_available():
        print('mps is not available')
        exit(-1)
    device = torch.device(device_name)
    # set random seed to 0
    np.random.seed(0)
    torch.manual_seed(0)
    # GPU Lab corpus: traindata.pt is what generate_sine_wave.py (same directory upstream) writes
    # with torch.save of a float64 numpy array of sines; here it is made the same way, smaller
    # (N=12 series of L=120 steps instead of 100 x 1000), and saved to / loaded from a temporary
    # directory, so torch.save / torch.load of a numpy array are still exercised.
    import os, tempfile
    _T, _L, _N = 20, 120, 12
    np.random.seed(2)
    _x = np.empty((_N, _L), 'int64')
    _x[:] = np.array(range(_L)) + np.random.randint(-4 * _T, 4 * _T, _N).reshape(_N, 1)
    _path = os.path.join(tempfile.mkdtemp(), 'traindata.pt')
    torch.save(np.sin(_x / 1.0 / _T).astype('float64'), open(_path, 'wb'))
    np.random.seed(0)
    # load data and make training set
    data = torch.from_numpy(torch.load(_path)).to(device)
    input = data[3:, :-1]
    target = data[3:, 1:]
    test_input = data[:3, :-1]
    test_target = data[:3, 1:]
    # build the model
    seq = Sequence().to(device).double()
    criterion = nn.MSELoss().to(device)
    # use LBFGS as optimizer since we can load the whole data to train
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    #begin to train
    for i in range(opt.steps):
        print('STEP: ', i)
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            print('loss:', loss.item())
            loss.backward()
            return loss
        optimizer.step(closure)
        # begin to predict, no need to track gradient here
        with torch.no_grad():
            # GPU Lab corpus: 100 future steps instead of 1000, to run fast.
            future = 100
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            print('test loss:', loss.item())
            y = pred.cpu().detach().numpy()
        # draw the result
        plt.figure(figsize=(30,10))
        plt.title('Predict future values for time sequences\n(Dashlines are predicted values)', fontsize=30)
        plt.xlabel('x', fontsize=20)
        plt.ylabel('y', fontsize=20)
        plt.xticks(fontsize=20)
        plt.yticks(fontsize=20)
        def draw(yi, color):
            plt.plot(np.arange(input.size(1)), yi[:input.size(1)], color, linewidth = 2.0)
            plt.plot(np.arange(input.size(1), input.size(1) + future), yi[input.size(1):], color + ':', linewidth = 2.0)
        draw(y[0], 'r')
        draw(y[1], 'g')
        draw(y[2], 'b')
        plt.savefig('predict%d.pdf'%i)
        plt.close()
