"""Issue 53: an hf: folder saved without its tokenizer ends in one line naming what is
missing, not transformers' "stat: path should be string ... not NoneType"."""

from __future__ import annotations

from pathlib import Path

from parity.cli import main


def test_a_folder_without_tokenizer_files_says_so(tmp_path: Path, capsys) -> None:
    import torch
    import transformers

    from tests.helpers.hf_models import SPECIAL

    config = transformers.LlamaConfig(
        vocab_size=96, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32, **SPECIAL,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "model")
    assert main(["validate", "--model", f"hf:{tmp_path / 'model'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no tokenizer files in the folder" in err and "NoneType" not in err
    assert len(err.splitlines()) == 1
