"""A run cut by a checkpoint and resumed, for the tests that check what a checkpoint keeps."""

from __future__ import annotations


def resumed_appearance(scene, cfg, device, path, before: int, after: int, **resume_kw) -> tuple:
    """``(state, want, got)``: a Trainer of ``cfg`` runs ``before`` steps, saves a
    checkpoint to ``path``, runs ``after`` more (``want``: its appearance's state_dict);
    a second Trainer (``resume_kw``, e.g. ``init=None``) loads the checkpoint (``state``)
    and runs the same ``after`` steps (``got``)."""
    from spirula.train.run import load_checkpoint, save_checkpoint
    from spirula.train.trainer import Trainer

    a = Trainer(scene, cfg, device)
    try:
        for _ in range(before):
            a.train_step()
        save_checkpoint(a, path)
        for _ in range(after):
            a.train_step()
        want = a.appearance.state_dict()
    finally:
        a.free()
    state = load_checkpoint(path)
    b = Trainer(scene, cfg, device, **resume_kw)
    try:
        b.load_state_dict(state)
        for _ in range(after):
            b.train_step()
        got = b.appearance.state_dict()
    finally:
        b.free()
    return state, want, got
