"""Which items a question is about: one value (`ItemFocus`), decided once per turn from the
item confirmation and read by every stage after it.

An item is named either by the catalog (its name, alias or code, `ItemCatalog.items_in`) or,
where no catalog item was confirmed, by a model code ("X3 Pro", `engines.lexical.model_codes`).
With this one definition:

- retrieval reads only documents and chunks not tagged with other items (`item_ids`);
- context drops the rows, sentences and clauses about other items only (`focused`), the FAQs
  asked about other items (`faq_hits`), and, while the item is open, a FAQ about one candidate;
- the answerer never answers with a unit about another item (`about_others`) and reads the
  question's model codes from here (`codes`) instead of parsing them again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from engines.lexical import model_codes
from knowledge.items.matching import ItemCatalog, focus_text
from retrieval.contracts import FaqHit, RetrievalResult


@dataclass(frozen=True)
class ItemFocus:
    # The model codes the question names, folded ("星河X3 Pro" → "x3pro").
    codes: frozenset[str] = frozenset()
    # The catalog items the question was confirmed to be about (rules A, B, or the asker's choice).
    item_ids: tuple[int, ...] = ()
    # The items still open between (rule C): a clarifying question may follow.
    candidates: tuple[int, ...] = ()
    catalog: ItemCatalog | None = None

    @classmethod
    def of_question(cls, question: str) -> ItemFocus:
        """The focus where there is no catalog: the model codes the question names."""
        return cls(codes=model_codes(question))

    @property
    def confirmed(self) -> bool:
        return bool(self.item_ids) and self.catalog is not None

    @property
    def unsure(self) -> bool:
        return bool(self.candidates) and self.catalog is not None

    def about_others(self, text: str) -> bool:
        """`text` names items and none of them is one the question is about: "星河X3 整机保修
        2 年" never answers a question about X3 Pro. Text naming no item is about every one."""
        if self.confirmed:
            assert self.catalog is not None
            named = self.catalog.items_in(text)
            if named:
                return not named & set(self.item_ids)
        if self.codes:
            codes = model_codes(text)
            return bool(codes) and not codes & self.codes
        return False

    def names_candidate(self, text: str) -> bool:
        """Whether `text` names any of the open candidates: what it says may then hold for some
        of them only, and answering would be a guess between them."""
        return self.unsure and bool(self.catalog.items_in(text) & set(self.candidates))  # type: ignore[union-attr]

    def focused(self, text: str) -> str:
        """`text` without its rows, sentences and clauses about other items only."""
        if not self.confirmed:
            return text
        return focus_text(text, catalog=self.catalog, item_ids=self.item_ids)  # type: ignore[arg-type]

    def results(self, results: Iterable[RetrievalResult]) -> tuple[RetrievalResult, ...]:
        """Each result read with `focused`: "X3 Pro 的保修期" is not answered with X3's row of the
        range's shared table."""
        out = []
        for result in results:
            content = self.focused(result.content)
            out.append(result if content == result.content else replace(result, content=content))
        return tuple(out)

    def admits_faq(self, question: str) -> bool:
        """Whether a FAQ asked as `question` may speak for this question: not one about other
        items than those confirmed, and, while the item is open, not one about a single candidate
        (that would be the guess the clarifying question is there to avoid)."""
        if self.catalog is None:
            return True
        named = self.catalog.items_in(question)
        if not named:
            return True
        if self.item_ids:
            return bool(named & set(self.item_ids))
        if self.candidates:
            return len(named & set(self.candidates)) != 1
        return True

    def faq_hits(self, hits: Iterable[FaqHit]) -> tuple[FaqHit, ...]:
        """The FAQ hits that may speak for this question, each answer `focused`."""
        kept = []
        for hit in hits:
            if not self.admits_faq(hit.question):
                continue
            answer = self.focused(hit.answer)
            kept.append(hit if answer == hit.answer else replace(hit, answer=answer))
        return tuple(kept)
