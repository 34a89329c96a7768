"""Special-token strings in chat content: find them before a chat template renders them.

A chat template renders message contents into one text that is then tokenized with the
tokenizer's special tokens recognised (as vLLM and Hugging Face transformers do for chat
prompts). A content holding the text ``<|im_start|>`` or ``<|assistant|>`` therefore becomes
that control token, and an end user's text could open a new role turn. This module lists the
strings that the tokenizer turns into special tokens, so the backend can refuse such content
unless the caller allows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SpecialTokenGuard:
    """The special-token strings of one tokenizer.

    Attributes:
        pattern: a regular expression matching any of them (longest first), or None when the
            tokenizer has none.
    """

    pattern: re.Pattern[str] | None

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> SpecialTokenGuard:
        """Collect ``all_special_tokens`` and every added token flagged ``special`` (Hugging Face
        ``PreTrainedTokenizerBase.added_tokens_decoder``) of a transformers-style tokenizer."""
        strings: set[str] = {t for t in getattr(tokenizer, "all_special_tokens", None) or [] if isinstance(t, str)}
        try:
            added = dict(getattr(tokenizer, "added_tokens_decoder", None) or {})
        except Exception:  # a tokenizer wrapper without the mapping: only all_special_tokens
            added = {}
        for token in added.values():
            content = getattr(token, "content", None)
            if isinstance(content, str) and getattr(token, "special", False):
                strings.add(content)
        strings.discard("")
        if not strings:
            return cls(None)
        alternatives = "|".join(re.escape(s) for s in sorted(strings, key=lambda s: (-len(s), s)))
        return cls(re.compile(alternatives))

    def find(self, text: str) -> str | None:
        """The first special-token string in ``text``, or None."""
        if self.pattern is None:
            return None
        match = self.pattern.search(text)
        return match.group(0) if match else None
