"""The torch module of a sentence-transformers pipeline (parity.hf.sentence): the
transformers model as child "0", Pooling as "1", Normalize as "2", computing what
sentence-transformers' own modules compute (its Pooling's padded path, `F.normalize`)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers.utils import ModelOutput


@dataclass
class SentenceOutput(ModelOutput):
    """Both outputs by the names Optimum gives them (mapping and attribute access)."""

    token_embeddings: torch.Tensor | None = None
    sentence_embedding: torch.Tensor | None = None


class Pooling(torch.nn.Module):
    """Token embeddings -> one vector per row, each mode's concatenated."""

    def __init__(self, modes: tuple[str, ...]) -> None:
        super().__init__()
        self.modes = modes

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.unsqueeze(-1).expand_as(tokens).to(tokens.dtype)
        made = []
        for mode in self.modes:
            if mode == "cls":  # the first attended token (left padding: not index 0)
                first = mask.to(torch.int).argmax(dim=1)
                index = first.unsqueeze(-1).unsqueeze(1).expand(-1, 1, tokens.shape[-1])
                made.append(torch.gather(tokens, 1, index).squeeze(1))
            elif mode == "max":
                made.append(tokens.masked_fill(weights == 0, float("-inf")).max(dim=1).values)
            elif mode in ("mean", "mean_sqrt_len_tokens"):
                total = (tokens * weights).sum(dim=1)
                count = torch.clamp(weights.sum(dim=1), min=1e-9)
                made.append(total / (count if mode == "mean" else torch.sqrt(count)))
            elif mode == "weightedmean":
                steps = torch.arange(1, tokens.shape[1] + 1, device=tokens.device)
                weighted = weights * steps.view(1, -1, 1).to(tokens.dtype)
                total = (tokens * weighted).sum(dim=1)
                made.append(total / torch.clamp(weighted.sum(dim=1), min=1e-9))
            else:  # lasttoken: the last attended token
                values, last = mask.flip(1).max(1)
                length = tokens.shape[1]
                last = torch.where(values == 0, length - 1, last)
                index = (
                    (length - last - 1).unsqueeze(-1).unsqueeze(1).expand(-1, 1, tokens.shape[-1])
                )
                made.append(torch.gather(tokens * weights, 1, index).squeeze(1))
        return torch.cat(made, dim=-1)


class Normalize(torch.nn.Module):
    def forward(self, embedding: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(embedding, p=2, dim=1)


class SentenceEmbedding(torch.nn.Module):
    """Transformer -> Pooling (-> Normalize). `config` and `main_input_name` are the
    transformer's, so the hf: run reads them as it reads any model's."""

    def __init__(self, model: Any, modes: tuple[str, ...], normalize: bool) -> None:
        super().__init__()
        self.add_module("0", model)
        self.add_module("1", Pooling(modes))
        if normalize:
            self.add_module("2", Normalize())
        self.config = model.config
        self.main_input_name = model.main_input_name
        self._accepted = set(inspect.signature(model.forward).parameters)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> SentenceOutput:
        given = {"input_ids": input_ids, "attention_mask": attention_mask}
        given["token_type_ids"] = token_type_ids
        kwargs = {k: v for k, v in given.items() if v is not None and k in self._accepted}
        modules = dict(self.named_children())
        tokens = modules["0"](**kwargs).last_hidden_state
        if attention_mask is None or attention_mask.shape[-1] != tokens.shape[1]:
            attention_mask = torch.ones(tokens.shape[:-1], dtype=torch.int64, device=tokens.device)
        sentence = modules["1"](tokens, attention_mask)
        if "2" in modules:
            sentence = modules["2"](sentence)
        return SentenceOutput(token_embeddings=tokens, sentence_embedding=sentence)
