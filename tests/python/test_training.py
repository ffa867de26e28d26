# Training through torch.optim on the `params` parameter reduces the loss (CPU tensors), for a
# Network, a NetworkWithInputEncoding and a grid encoding once it exists.
import pytest
import torch

import tinycudann as tcnn
from tnn_test_utils import CPU, HASHGRID_CONFIG, mlp_config, requires_encoding, smooth_target


def train(model, steps=300, lr=1e-2, batch=256):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    x_eval = torch.rand(1024, 2, generator=gen)
    y_eval = smooth_target(x_eval)

    def eval_loss():
        with torch.no_grad():
            return (model(x_eval).float() - y_eval).square().mean().item()

    initial = eval_loss()
    for _ in range(steps):
        x = torch.rand(batch, 2, generator=gen)  # fresh samples every step, as in real training
        loss = (model(x).float() - smooth_target(x)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return initial, eval_loss()


def test_network_training_reduces_loss():
    net = tcnn.Network(2, 2, mlp_config(n_neurons=32, n_hidden_layers=2, activation="Tanh"), device=CPU)
    initial, final = train(net)
    # The target is smooth and the network can represent it well (this run reaches ~30x less error);
    # 10x is far from a run that does not learn, which stays near the initial loss.
    assert final < initial / 10, (initial, final)


def test_network_with_input_encoding_training_reduces_loss():
    model = tcnn.NetworkWithInputEncoding(2, 2, {"otype": "Identity", "scale": 2.0, "offset": -1.0},
                                          mlp_config(n_neurons=32, n_hidden_layers=2, activation="ReLU"),
                                          device=CPU)
    initial, final = train(model)
    assert final < initial / 10, (initial, final)


def test_fp64_training_reduces_loss():
    net = tcnn.Network(2, 2, mlp_config(n_neurons=16, n_hidden_layers=1, activation="Tanh"),
                       dtype=torch.float64, device=CPU)
    initial, final = train(net, steps=200)
    assert final < initial / 10, (initial, final)


@requires_encoding("HashGrid")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_grid_encoding_with_torch_head_trains(dtype):
    class GridWithHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = tcnn.Encoding(2, HASHGRID_CONFIG, dtype=dtype, device=CPU)
            self.head = torch.nn.Linear(self.enc.n_output_dims, 2)

        def forward(self, x):
            return self.head(self.enc(x).float())

    initial, final = train(GridWithHead(), steps=300, lr=1e-2)
    assert final < initial / 5, (initial, final)
