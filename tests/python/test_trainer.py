# tinycudann.Trainer: the C++ Trainer's step on torch tensors. Its steps against the same step written
# with the module's autograd and a torch-side SGD update, its parameters shared with the module
# (state_dict, writes between steps, pickling), checkpoints and optimizer state, errors; on CUDA
# (marker gpu) graph replay against eager steps bit for bit, the legacy default stream, and a
# FullyFusedMLP model's fused step against the unfused one.
import copy
import pickle

import pytest
import torch

import tinycudann as tcnn
from tnn_test_utils import EPS, HASHGRID_CONFIG, mlp_config, rel_l2

CPU = torch.device("cpu")


def make_model(device=CPU, otype="PortableMLP", enc=None, n_in=2, n_out=3, dtype=None, seed=7):
    enc = enc or dict(HASHGRID_CONFIG)
    return tcnn.NetworkWithInputEncoding(n_in, n_out, enc, mlp_config(otype=otype, n_neurons=32), seed=seed,
                                         dtype=dtype, device=device)


def batch(n, n_in=2, n_out=3, seed=0, device=CPU):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, n_in, generator=gen)
    t = torch.stack([torch.sin(6 * x[:, 0]), x[:, 1], x[:, 0] * x[:, 1]], 1)[:, :n_out]
    return x.to(device), t.to(device)


def test_sgd_step_equals_the_module_autograd_step():
    # SGD without regularisation: params <- params - lr * dL/dparams, with tcnn's L2 loss (mean over
    # the N = batch * n_out elements of (y - t)^2). The same through autograd and a manual update.
    lr = 0.05
    model = make_model()
    twin = copy.deepcopy(model)
    trainer = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "SGD", "learning_rate": lr, "l2_reg": 0.0})
    for step in range(3):
        x, t = batch(1000, seed=step)
        trainer.step(x, t)
        y = twin(x)
        loss = ((y - t) ** 2).mean()
        twin.params.grad = None
        loss.backward()
        with torch.no_grad():
            twin.params -= lr * twin.params.grad
        # Same fp32 arithmetic, other summation orders (the loss kernel vs torch's mean): a few eps
        # relative per step, growing with the steps.
        assert trainer.loss() == pytest.approx(loss.item(), rel=64 * EPS[torch.float32])
    assert rel_l2(model.params.detach(), twin.params.detach()) <= 64 * EPS[torch.float32]
    assert trainer.step_count == 3


def test_module_sees_the_trained_weights_and_writes_between_steps_take_effect():
    model = make_model()
    trainer = tcnn.Trainer(model, {"otype": "RelativeL2"}, {"otype": "Adam", "learning_rate": 1e-2})
    x, t = batch(2048)
    before = model.params.detach().clone()
    for _ in range(5):
        trainer.step(x, t)
    assert not torch.equal(before, model.params.detach())
    # A plain forward and the trainer's inference (no EMA: the trained weights) agree bit for bit.
    with torch.no_grad():
        assert torch.equal(model(x), trainer.inference(x))
    assert model.state_dict()["params"].data_ptr() == model.params.data_ptr()
    # Weights written through .data (no autograd version bump) are what the next step starts from:
    # with SGD at lr 0 the loss is the loss of exactly those weights.
    frozen = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "SGD", "learning_rate": 0.0, "l2_reg": 0.0})
    model.params.data.copy_(before)
    frozen.step(x, t)
    with torch.no_grad():
        expect = ((model(x) - t) ** 2).mean().item()
    assert torch.equal(model.params.detach(), before)
    assert frozen.loss() == pytest.approx(expect, rel=64 * EPS[torch.float32])
    # Pickled after training, the module carries the trained weights.
    again = pickle.loads(pickle.dumps(model))
    assert torch.equal(again.params.detach(), model.params.detach())


def test_training_reduces_the_loss_with_every_optimizer_wrapper():
    x, t = batch(4096)
    for opt in [{"otype": "Adam", "learning_rate": 1e-2},
                {"otype": "ExponentialDecay", "decay_start": 5, "decay_interval": 5, "nested": {"otype": "Adam", "learning_rate": 1e-2}},
                {"otype": "EMA", "decay": 0.9, "nested": {"otype": "Adam", "learning_rate": 1e-2}},
                {"otype": "Novograd", "learning_rate": 1e-2},
                {"otype": "SGD", "learning_rate": 1.0}]:
        model = make_model()
        trainer = tcnn.Trainer(model, {"otype": "L2"}, opt)
        trainer.step(x, t)
        first = trainer.loss()
        for _ in range(40):
            trainer.step(x, t)
        assert trainer.loss() < first, opt
        if opt["otype"] == "EMA":  # inference weights are the average, not the trained ones
            with torch.no_grad():
                assert not torch.equal(trainer.inference(x), model(x))


def test_pdf_and_losses():
    x, t = batch(512)
    for loss in ["L2", "L1", "RelativeL2", "RelativeL1", "MAPE", "SMAPE", "RelativeL2Luminance"]:
        model = make_model()
        trainer = tcnn.Trainer(model, {"otype": loss}, {"otype": "Adam"})
        trainer.step(x, t, pdf=torch.full((512, 1), 2.0))
        with_pdf = trainer.loss()
        model2 = make_model()
        trainer2 = tcnn.Trainer(model2, {"otype": loss}, {"otype": "Adam"})
        trainer2.step(x, t)
        # The pdf divides value and gradient: the loss of the same weights is halved.
        assert with_pdf == pytest.approx(trainer2.loss() / 2, rel=16 * EPS[torch.float32]), loss


def test_checkpoint_and_state_dict_round_trip(tmp_path):
    model = make_model()
    trainer = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "Adam", "learning_rate": 1e-2})
    x, t = batch(1024)
    for _ in range(3):
        trainer.step(x, t)
    trainer.save(tmp_path / "run.tnn")
    state = trainer.state_dict()
    weights = model.params.detach().clone()
    for _ in range(3):
        trainer.step(x, t)
    after = model.params.detach().clone()
    # From the checkpoint: the same weights and optimizer state, so the same next steps bit for bit.
    trainer.load(tmp_path / "run.tnn")
    assert torch.equal(model.params.detach(), weights)
    assert trainer.step_count == 3
    for _ in range(3):
        trainer.step(x, t)
    assert torch.equal(model.params.detach(), after)
    # The same through state_dict: weights from the module, optimizer state from the trainer.
    model.params.data.copy_(weights)
    trainer.load_state_dict(state)
    for _ in range(3):
        trainer.step(x, t)
    assert torch.equal(model.params.detach(), after)
    other = tcnn.Trainer(make_model(), {"otype": "L1"}, {"otype": "Adam"})
    with pytest.raises(ValueError, match="config"):
        other.load_state_dict(state)


def test_learning_rate_and_settings():
    trainer = tcnn.Trainer(make_model(), None, {"otype": "Adam", "learning_rate": 1e-3})
    assert trainer.learning_rate == pytest.approx(1e-3)
    trainer.learning_rate = 5e-3
    assert trainer.learning_rate == pytest.approx(5e-3)
    assert trainer.config()["loss"]["otype"] == "L2"
    assert trainer.loss_scale == 1.0


def test_errors_name_what_is_wrong():
    model = make_model()
    with pytest.raises(TypeError, match="tinycudann module"):
        tcnn.Trainer(torch.nn.Linear(2, 3))
    with pytest.raises(ValueError, match="(?i)otype"):
        tcnn.Trainer(model, {"otype": "NoSuchLoss"})
    with pytest.raises(ValueError, match="(?i)otype"):
        tcnn.Trainer(model, None, {"otype": "NoSuchOptimizer"})
    with pytest.raises(TypeError, match="float32 master"):
        tcnn.Trainer(make_model(dtype=torch.float64))
    trainer = tcnn.Trainer(model)
    x, t = batch(64)
    with pytest.raises(ValueError, match=r"shape \[batch, 2\]"):
        trainer.step(x[:, :1], t)
    with pytest.raises(ValueError, match=r"shape \[64, 3\]"):
        trainer.step(x, t[:10])
    with pytest.raises(ValueError, match="pdf"):
        trainer.step(x, t, pdf=torch.ones(64, 2))
    with pytest.raises(RuntimeError, match="loss"):
        tcnn.Trainer(make_model()).loss()  # no step yet
    model.params = torch.nn.Parameter(torch.zeros(5))
    with pytest.raises(RuntimeError, match="params must be"):
        trainer.step(x, t)


def test_empty_batch_is_a_step_without_data():
    model = make_model()
    trainer = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "Adam"})
    x, t = batch(0)
    trainer.step(x, t)
    assert trainer.step_count == 1


# ---- CUDA ----------------------------------------------------------------------------------------

CUDA = torch.device("cuda")


def gpu_grid_model(otype="FullyFusedMLP", deterministic=True, seed=7):
    enc = dict(HASHGRID_CONFIG, deterministic=deterministic)
    return make_model(CUDA, otype=otype, enc=enc, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("otype", ["FullyFusedMLP", "PortableMLP", "BlasLtMLP"])
def test_graph_replays_equal_eager_steps_bit_for_bit(otype):
    # New input tensors every step (their addresses change): the trainer copies them into its own
    # buffers and replays one graph; a twin without graphs must end with the same bits. The grid's
    # deterministic gradient makes every kernel of the step reproducible.
    results = []
    for graphs in (True, False):
        model = gpu_grid_model(otype)
        trainer = tcnn.Trainer(model, {"otype": "RelativeL2"}, {"otype": "Adam", "learning_rate": 1e-2})
        trainer.use_graphs = graphs
        for step in range(8):
            x, t = batch(3000, seed=step, device=CUDA)
            trainer.step(x, t)
        results.append((model.params.detach().clone(), trainer.loss(), trainer.graph_steps))
    (p_graph, l_graph, n_graph), (p_eager, l_eager, n_eager) = results
    assert n_graph >= 5 and n_eager == 0
    assert torch.equal(p_graph, p_eager)
    assert l_graph == l_eager


@pytest.mark.gpu
def test_legacy_default_stream_and_side_streams_give_the_same_steps():
    results = []
    for use_side_stream in (False, True):
        model = gpu_grid_model()
        trainer = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "Adam", "learning_rate": 1e-2})
        side = torch.cuda.Stream()
        for step in range(6):
            x, t = batch(2048, seed=step, device=CUDA)
            if use_side_stream:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    trainer.step(x, t)
                torch.cuda.current_stream().wait_stream(side)
            else:
                trainer.step(x, t)  # torch's default: the legacy stream, the graph on the trainer's own
        assert trainer.graph_steps >= 3
        # The caller's stream sees the trained weights without a synchronisation.
        results.append(model.params.detach().clone())
    assert torch.equal(results[0], results[1])


@pytest.mark.gpu
def test_fused_step_matches_the_module_autograd_step():
    # FullyFusedMLP with L2: the trainer's step runs forward, loss and backward in one kernel. Against
    # the same step through the module's autograd (SGD at lr 0 leaves the weights: the loss alone).
    model = gpu_grid_model("FullyFusedMLP")
    trainer = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "SGD", "learning_rate": 0.0, "l2_reg": 0.0})
    assert trainer.fused_loss
    x, t = batch(5000, device=CUDA)
    trainer.step(x, t)
    with torch.no_grad():
        y = model(x).float()
    # fp16 output rounded the same way; the loss sums N terms: fp32 summation-order error.
    assert trainer.loss() == pytest.approx(((y - t) ** 2).mean().item(), rel=1e-4)


@pytest.mark.gpu
def test_large_batches_with_new_addresses_run_eagerly_and_equal_graph_steps():
    import tinycudann.trainer as tr

    results = []
    for limit in (tr.STATIC_COPY_LIMIT_BYTES, 0):  # copies into static buffers vs never
        old = tr.STATIC_COPY_LIMIT_BYTES
        tr.STATIC_COPY_LIMIT_BYTES = limit
        try:
            model = gpu_grid_model()
            trainer = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "Adam", "learning_rate": 1e-2})
            keep = []  # alive, so that every step's tensors have new addresses
            for step in range(6):
                x, t = batch(1024, seed=step, device=CUDA)
                keep.append((x, t))
                trainer.step(x, t)
            results.append((model.params.detach().clone(), trainer.graph_steps))
        finally:
            tr.STATIC_COPY_LIMIT_BYTES = old
    assert results[0][1] >= 3 and results[1][1] == 0
    assert torch.equal(results[0][0], results[1][0])
