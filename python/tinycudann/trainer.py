# tinycudann.Trainer: the C++ Trainer's training step for a module of this package. One call runs
# forward, loss, backward and optimizer (for FullyFusedMLP networks forward, loss and backward in one
# kernel) and, once shapes repeat, replays the whole step from one CUDA graph. The trainer updates the
# module's own `params` tensor, so state_dict(), pickling and a later module(x) see the trained weights.
import numbers

import torch

from . import _C
from .modules import Module, _check_config, _device_guard, _where

# Inputs and targets of at most this many bytes are copied into buffers of the trainer's own when
# their addresses change between steps, so that the step replays from one CUDA graph (a graph reads
# fixed addresses); larger batches run the captured step only where the caller's addresses repeat,
# else eagerly (their copy would cost more GPU time than the launches it saves).
STATIC_COPY_LIMIT_BYTES = 64 << 20


class _StaticBatch:
    """The trainer's buffers for one batch shape, and whether steps of that shape use them."""

    def __init__(self, key):
        self.key = key
        self.last_ptrs = None
        self.use_copies = False
        self.tensors = None


class Trainer:
    """Fused training of a tinycudann module: ``Trainer(model, loss_config, optimizer_config)``.

    ``step(x, target, pdf=None)`` runs the C++ Trainer's step on torch tensors (CUDA or CPU, on the
    device of ``model.params``): ``x`` is ``[batch, n_input_dims]``, ``target`` ``[batch,
    n_output_dims]`` (both cast to float32), ``pdf`` optional ``[batch, 1]`` or ``[batch,
    n_output_dims]``. Configs are tcnn's JSON: every loss and optimizer of tiny-rdna4-nn (L2, L1,
    RelativeL2, ...; Adam, SGD, Novograd and the wrappers ExponentialDecay, EMA, ...). The trainer
    updates ``model.params`` in place: ``model(x)``, ``model.state_dict()`` and pickling see the
    trained weights; values written into ``model.params`` between steps (``load_state_dict``, ``.data``
    assignments) take effect at the next step.

    Nothing synchronises the device except ``loss()``, ``save()``, ``load()`` and ``state_dict()``.
    """

    def __init__(self, model, loss_config=None, optimizer_config=None, seed=None):
        if not isinstance(model, Module):
            raise TypeError(
                f"tinycudann.Trainer: model must be a tinycudann module (Network, Encoding, NetworkWithInputEncoding), "
                f"got {type(model).__name__}"
            )
        loss_config = {"otype": "L2"} if loss_config is None else _check_config(loss_config, "loss_config")
        optimizer_config = (
            {"otype": "Adam"} if optimizer_config is None else _check_config(optimizer_config, "optimizer_config")
        )
        params = model.params
        if params.dtype != torch.float32:
            raise TypeError(
                f"tinycudann.Trainer: {model._native.describe}: the Trainer keeps float32 master weights, but this "
                f"module's params are {params.dtype}; train float64 modules with a torch optimizer"
            )
        if seed is None:
            seed = model.seed
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"tinycudann.Trainer: seed must be a non-negative int, got {seed!r}")
        self.model = model
        self.loss_config = dict(loss_config)
        self.optimizer_config = dict(optimizer_config)
        self._device = params.device
        device_index, _ = _where(params)
        with _device_guard(params):
            self._native = _C.Trainer(model._native.module, self.loss_config, self.optimizer_config, device_index,
                                      int(seed))
        self._bound = None  # the address of the params the C++ trainer reads and updates
        self._static = None
        self._sync_params()

    # --- parameters -------------------------------------------------------------------------------

    def _sync_params(self):
        params = self.model.params
        if params.device != self._device:
            raise RuntimeError(
                f"tinycudann.Trainer: the model's params moved to {params.device}, but the trainer was made for "
                f"{self._device}; make a new Trainer after moving a model"
            )
        if params.dtype != torch.float32 or params.dim() != 1 or params.numel() != self.model._native.n_params \
                or not params.is_contiguous():
            raise RuntimeError(
                f"tinycudann.Trainer: {self.model._native.describe}: params must be a contiguous float32 vector of "
                f"{self.model._native.n_params} values, got {params.dtype} of shape {list(params.shape)}"
            )
        # Rebinding only when the tensor's memory moved: every C++ step reads the values anew.
        if params.data_ptr() != self._bound:
            _, stream = _where(params)
            with _device_guard(params):
                self._native.bind_params(stream, params.data_ptr())
            self._bound = params.data_ptr()

    # --- training ---------------------------------------------------------------------------------

    def _checked(self, t, cols, what, rows=None):
        native = self.model._native
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tinycudann.Trainer: {what} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != self._device:
            raise RuntimeError(
                f"tinycudann.Trainer: {what} is on {t.device} but the model's params are on {self._device}"
            )
        if t.dim() != 2 or (cols is not None and t.shape[1] not in cols) or (rows is not None and t.shape[0] != rows):
            want = " or ".join(str(c) for c in cols) if cols else "n"
            raise ValueError(
                f"tinycudann.Trainer: {native.describe}: {what} must have shape [{rows if rows is not None else 'batch'}, "
                f"{want}], got {list(t.shape)}"
            )
        if t.is_complex():
            raise TypeError(f"tinycudann.Trainer: {what} must be real, got {t.dtype}")
        return t.to(torch.float32).contiguous()

    def _static_views(self, x, target, pdf):
        key = (x.shape[0], pdf.shape[1] if pdf is not None else 0)
        st = self._static
        if st is None or st.key != key:
            st = self._static = _StaticBatch(key)
        tensors = (x, target) if pdf is None else (x, target, pdf)
        ptrs = tuple(t.data_ptr() for t in tensors)
        small = sum(t.numel() * t.element_size() for t in tensors) <= STATIC_COPY_LIMIT_BYTES
        if not st.use_copies and small and st.last_ptrs is not None and ptrs != st.last_ptrs:
            st.use_copies = True
        st.last_ptrs = ptrs
        if not st.use_copies:
            return tensors
        if st.tensors is None:
            st.tensors = tuple(torch.empty_like(t) for t in tensors)
        for dst, src in zip(st.tensors, tensors):
            dst.copy_(src)
        return st.tensors

    def step(self, x, target, pdf=None):
        """One training step on a batch (asynchronous). Returns nothing; loss() fetches the loss."""
        native = self.model._native
        x = self._checked(x, (native.n_input_dims,), "x")
        target = self._checked(target, (native.n_output_dims,), "target", rows=x.shape[0])
        if pdf is not None:
            pdf = self._checked(pdf, (1, native.n_output_dims), "pdf", rows=x.shape[0])
        self._sync_params()
        if self._device.type == "cuda" and self._native.use_graphs():
            views = self._static_views(x, target, pdf)
            x, target = views[0], views[1]
            pdf = views[2] if pdf is not None else None
        _, stream = _where(x)
        with _device_guard(x):
            self._native.step(stream, x.shape[0], x.data_ptr(), target.data_ptr(),
                              0 if pdf is None else pdf.data_ptr(), 0 if pdf is None else pdf.shape[1])

    def loss(self):
        """The loss of the last step, as a float (synchronises the device)."""
        _, stream = _where(self.model.params)
        with _device_guard(self.model.params):
            return self._native.loss(stream)

    @torch.no_grad()
    def inference(self, x):
        """The model's output with the optimizer's inference weights where it has them (EMA, Average),
        else the trained weights (then the same as model(x))."""
        native = self.model._native
        x = self._checked(x, (native.n_input_dims,), "x")
        self._sync_params()
        out = torch.empty((x.shape[0], native.n_output_dims), dtype=native.output_dtype, device=x.device)
        _, stream = _where(x)
        with _device_guard(x):
            self._native.inference(stream, x.shape[0], x.data_ptr(), out.data_ptr())
        return out

    # --- settings and state -----------------------------------------------------------------------

    @property
    def step_count(self):
        return self._native.step_count()

    @property
    def learning_rate(self):
        return self._native.learning_rate()

    @learning_rate.setter
    def learning_rate(self, value):
        self._native.set_learning_rate(float(value))

    @property
    def use_graphs(self):
        """Whether CUDA steps are captured into a graph once their shapes repeat (default True)."""
        return self._native.use_graphs()

    @use_graphs.setter
    def use_graphs(self, value):
        self._native.set_use_graphs(bool(value))

    @property
    def graph_steps(self):
        """Steps run from a CUDA graph so far (the capturing steps included)."""
        return self._native.graph_steps()

    @property
    def fused_loss(self):
        """Whether steps without a pdf run forward, loss and backward of the network as one kernel."""
        return self._native.fused_loss()

    @property
    def loss_scale(self):
        return self._native.loss_scale()

    def config(self):
        return self._native.config()

    def state_dict(self):
        """The optimizer's state (step counter, moments, ...) as host bytes; the weights are the model's."""
        _, stream = _where(self.model.params)
        with _device_guard(self.model.params):
            blobs = self._native.optimizer_state(stream)
        return {"config": self.config(), "optimizer": [(n, d, bytes(b)) for n, d, b in blobs]}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or "optimizer" not in state:
            raise ValueError("tinycudann.Trainer.load_state_dict: expected a dict from Trainer.state_dict()")
        if state.get("config", self.config()) != self.config():
            raise ValueError(
                f"tinycudann.Trainer.load_state_dict: the state is for the config {state['config']}, this trainer "
                f"has {self.config()}"
            )
        _, stream = _where(self.model.params)
        with _device_guard(self.model.params):
            self._native.load_optimizer_state(stream, [(n, d, bytes(b)) for n, d, b in state["optimizer"]])

    def save(self, path):
        """A checkpoint file (config, weights, optimizer state; versioned, checksummed, written atomically)."""
        self._sync_params()
        _, stream = _where(self.model.params)
        with _device_guard(self.model.params):
            self._native.save(stream, str(path))

    def load(self, path):
        """Loads a checkpoint of the same config into model.params and the optimizer."""
        self._sync_params()
        _, stream = _where(self.model.params)
        with _device_guard(self.model.params):
            self._native.load(stream, str(path))
