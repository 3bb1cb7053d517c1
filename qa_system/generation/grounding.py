"""Generated answers grounded or withheld: a RAG answer is shown only when the reviews it cites say it.

A small generator writes fluent text that no review says ("does not have a built-in water heater",
of a kettle nobody described so). ``GroundingCheck`` measures how much of a generated answer the
reviews it cites support: the share of its content words (numbers included) that occur in those
reviews, or an extractive answer over the same reviews that says the same thing. A number is a claim
of its own: "lasts 12 hours" shares most of its words with "lasts 10 hours", so every number the answer
gives must be one the cited reviews (or the question) give, as digits or as a word ("three" is 3). It may not deny
what the question asks of when they speak of none of it ("No, it is not waterproof" of reviews that never mention
water: ``unmentioned_topics``), and it must say more than a bare yes or no. An answer below
``min_support``, or failing one of those, is withheld: the pipeline returns the extractive answers instead (the reader's,
through the answer selector when there is one), each carrying in ``meta`` the withheld text and
why. An answer that cites no review is checked against every review it was given, and shown flagged
(``meta["flags"]``): nothing points the reader to where it comes from. A sentence the generator wrote
again (a small model may loop on one) is kept once, and the answer flagged for it. Shared words do not
make agreement: "Yes, PayPal is supported" shares every content word with "PayPal is not supported", so
an answer that words a claim the other way round from every cited sentence saying it (the same words
negated on one side only, ``contradicted``) is withheld too.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from haystack import Document, ExtractedAnswer, GeneratedAnswer, component, default_from_dict, default_to_dict

from qa_system.errors import check_number
from qa_system.generation.answers import strip_citations
from qa_system.metrics.squad import f1 as token_f1
from qa_system.nouns import DOCUMENTS, noun_of

# Words that say nothing of the reviews' content: whether they occur there proves nothing.
_STOPWORDS = frozenset(
    "a an the of to in on for with at by from and or but is are was were be been being it its it's this that these those "
    "i you he she we they me him her us them my your his our their what how which who why when where does do did doing can could "
    "will would should has have had having there here about as so if not no nor yes very just also too than then more most "
    "some any all both each such only own same other into over under again further once review reviews reviewer says said "
    "according mentioned mentions s t d ll re ve m".split()  # and what an apostrophe leaves ("it's", "don't", "we'll")
)
_WORD = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[a-z0-9]+")
# An extractive answer saying the same thing as the generated one (token F1) grounds it too.
SAME_ANSWER_F1 = 0.5
# A negation applies to the content words of the next this many tokens, within its clause ("is not supported").
NEGATION_REACH = 3
_NEGATIONS = frozenset("not no never cannot without none nothing neither nor nobody nowhere hardly".split())
# Negations that turn nothing round: "not only cheap but also durable", "no doubt it lasts", "I cannot praise it enough".
_IDIOMS = re.compile(
    r"\b(?:not|no|without)\s+(?:only|just|merely|doubt|question|wonder|a\s+doubt)\b|\b(?:can\s+not|cannot|could\s+not)\b(?=[^,;.]*\benough\b)"
)
_CLAUSE_END = re.compile(r"[,;:!?()]|\.(?!\d)|\b(?:but|however|although|though)\b")
_CONTRACTED_NOT = ((re.compile(r"\bcan't\b"), "can not"), (re.compile(r"\bwon't\b"), "will not"), (re.compile(r"n't\b"), " not"))
# "Yes," or "No." answering the question; not the "No" of "No leaks at all", which denies what follows.
_ANSWER_WORD = re.compile(r"^\s*(?:yes|no)\s*(?:[,.!:;-][\s,.!:;-]*|$)", re.IGNORECASE)
_HYPHEN = re.compile(r"(?<=[a-z])-(?=[a-z])")


def _joined(text: str) -> str:
    """``text`` in lower case, its hyphenated words joined ("water-proof" is "waterproof")."""
    return _HYPHEN.sub("", text.lower())


# What a small generator puts before its answer ("The answer to this question is: No."): it says nothing of the reviews.
_PREAMBLE = re.compile(r"^\s*(?:the\s+)?answer(?:\s+to\s+(?:this|the|your)\s+question)?\s+is\b[\s:,-]*", re.IGNORECASE)
# Words that judge rather than name a topic: a question's "good" is answered by reviews that say "great".
_JUDGING = frozenset("good great bad nice excellent poor fine okay ok decent well better best worse worst worth recommend happy".split())


def _stem(word: str) -> str:
    """A crude stem, so that "batteries" finds "battery", "charging" "charge" and "running" "run"."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("e", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)] + keep
            if suffix in ("ing", "ed") and stem[-1] == stem[-2] and stem[-1] not in "lsz":  # "runn" of "running"
                stem = stem[:-1]
            return stem
    return word


def _content_word(token: str) -> str:
    """A token's stem, or its number as plain digits ("1,000" is 1000, "ten" 10); "" for a word that says nothing."""
    if token in _STOPWORDS:
        return ""
    return _plain_number(token) if token[0].isdigit() else _NUMBER_WORDS.get(token) or _stem(token)


def content_words(text: str) -> list[str]:
    """The content words of ``text`` (``_content_word``), in order: "doesn't" is "does not" (no content word)."""
    plain = text.lower().replace("’", "'")
    for contracted, spelled in _CONTRACTED_NOT:
        plain = contracted.sub(spelled, plain)
    return [word for token in _TOKEN.findall(plain) if (word := _content_word(token))]


def vocabulary(documents: list[Document]) -> set[str]:
    """The content words ``documents`` use, a hyphenated word's parts and the word joined ("water-proof" is
    "waterproof" too)."""
    texts = [d.content or "" for d in documents]
    return {w for text in texts for w in content_words(text) + content_words(_joined(text))}


def claim_text(answer: str) -> str:
    """``answer`` without its citations, a preamble ("The answer to this question is:") and a leading "Yes," or "No,":
    what it claims that the reviews could say."""
    return _ANSWER_WORD.sub("", _PREAMBLE.sub("", strip_citations(answer)))


def unmentioned_topics(answer: str, documents: list[Document], question: str) -> list[str]:
    """The words of the question that ``answer`` says back when it denies one of them ("waterproof" in "No, it is not
    waterproof") and ``documents`` mention none of them, as the answer writes them: denying what no review speaks of is
    no review's answer ("does not come with a case" over "Case not included" is about the case). What an answer
    affirms is left to its support (``support``); words that judge ("good") and numbers are left out."""
    asked = set(content_words(question)) - {_stem(word) for word in _JUDGING}
    denied = {word for _, reaches in clauses(claim_text(answer)) for reach in reaches for word in reach}
    said = {}
    for token in _TOKEN.findall(_joined(strip_citations(answer))):
        if (word := _content_word(token)) in asked and not word[0].isdigit():
            said.setdefault(word, token)
    if not denied & set(said) or set(said) & vocabulary(documents):
        return []
    return list(said.values())


def support(answer: str, documents: list[Document]) -> float:
    """The share of the answer's content words that occur in ``documents`` (1 when it has none); its hyphenated words
    read as their parts or joined, whichever the documents use ("water-proof" over "waterproof")."""
    text = strip_citations(answer)
    used = vocabulary(documents)
    shares = []
    for words in (content_words(text), content_words(_joined(text))):
        if not words:
            return 1.0
        shares.append(sum(w in used for w in words) / len(words))
    return max(shares)


_NUMBER_WORDS = {
    word: str(n)
    for n, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen "
        "nineteen twenty".split()
    )
} | {"thirty": "30", "forty": "40", "fifty": "50", "hundred": "100", "thousand": "1000", "half": "0.5", "dozen": "12"}


def numbers(text: str) -> set[str]:
    """The numbers ``text`` gives, as plain digits ("1,000" and "1000" alike; "three" as 3; "2.50" as 2.5)."""
    found = {_plain_number(n) for n in _NUMBER.findall(text)}
    return found | {_NUMBER_WORDS[w] for w in _WORD.findall(text.lower()) if w in _NUMBER_WORDS}


def _plain_number(number: str) -> str:
    if re.fullmatch(r"\d{1,3}(,\d{3})+", number):  # thousands separators
        number = number.replace(",", "")
    number = number.replace(",", ".")  # a decimal comma
    return number.rstrip("0").rstrip(".") if "." in number else number


def unsupported_numbers(answer: str, documents: list[Document], question: str = "") -> list[str]:
    """The numbers ``answer`` gives that neither ``documents`` nor the question gives, in the answer's order."""
    given = numbers(question).union(*(numbers(d.content or "") for d in documents))
    said = [_plain_number(n) for n in _NUMBER.findall(strip_citations(answer))]
    return list(dict.fromkeys(n for n in said if n not in given))


# A clause as read: its content words, and the words each of its negations reaches.
Clause = tuple[set[str], list[set[str]]]


def clauses(sentence: str) -> list[Clause]:
    """Each clause of a sentence as (its content words, the words each of its negations reaches), idioms left out:
    "PayPal is not supported" is ({paypal, support}, [{support}])."""
    plain = _joined(sentence).replace("’", "'")  # "water-proof" is "waterproof", as the question asks it
    for contracted, spelled in _CONTRACTED_NOT:
        plain = contracted.sub(spelled, plain)
    plain = _IDIOMS.sub(" ", plain)
    read = []
    for clause in _CLAUSE_END.split(plain):
        tokens = _TOKEN.findall(clause)
        content = ["" if token in _NEGATIONS else _content_word(token) for token in tokens]
        reaches = [
            {word for word in content[at + 1 : at + NEGATION_REACH + 1] if word} for at, token in enumerate(tokens) if token in _NEGATIONS
        ]
        read.append(({word for word in content if word}, reaches))
    return read


def _words_the_other_way_round(claim: list[Clause], said: list[Clause], shared: set[str]) -> bool:
    """Whether the ``shared`` words are negated on one side only: by an odd number of negations that reach them there
    ("supported" in "PayPal is not supported"; not "quality" in "the picture quality is not clear"; two negations say
    yes: "it does not work without the app")."""

    def negated(side: list[Clause]) -> bool:
        return sum(bool(reach & shared) for _, reaches in side for reach in reaches) % 2 == 1

    return negated(claim) != negated(said)


def contradicted(answer: str, documents: list[Document]) -> str | None:
    """The first sentence of ``answer`` that every sentence of ``documents`` saying it words the other way round, else None.

    A document sentence says an answer's sentence when it shares two of its content words (all, when it
    has fewer); it words it the other way round when the shared words are negated on one side only
    (``_words_the_other_way_round``). A sentence that negates nothing and names all the answer's sentence denies
    ("leak" of "does not leak") says it the other way round too. A leading "Yes," or "No," answers the question and is
    not read as a negation of the rest.
    """
    sentences = [clauses(s) for d in documents for s in _SENTENCE_END.split(d.content or "")]
    for claim in _SENTENCE_END.split(strip_citations(answer)):
        read = clauses(claim_text(claim))
        words = set().union(*(w for w, _ in read))
        denied = set().union(*(reach for _, reaches in read for reach in reaches))  # what the claim says is not so
        needed = min(2, len(words))
        verdicts = []
        for said in sentences:
            said_words = set().union(*(w for w, _ in said))
            if needed and len(shared := words & said_words) >= needed:
                verdicts.append(_words_the_other_way_round(read, said, shared))
            elif denied and denied <= said_words and not any(reaches for _, reaches in said):
                # "The kettle does not leak" against "Mine started leaking from the base", which names no kettle.
                verdicts.append(True)
        if verdicts and all(verdicts):
            return claim.strip()
    return None


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def collapse_repetition(text: str) -> tuple[str, int]:
    """``text`` with every sentence said before dropped (compared without citations, case or spacing), and how many were."""
    kept, seen = [], set()
    for sentence in _SENTENCE_END.split(text.strip()):
        key = " ".join(strip_citations(sentence).lower().split())
        if key and key in seen:
            continue
        seen.add(key)
        kept.append(sentence)
    return " ".join(kept), len(_SENTENCE_END.split(text.strip())) - len(kept)


def grounding_flags(cites_nothing: bool, repeated: int, noun: str = "reviews") -> list[str]:
    """What a reader of a generated answer is told about how it was written: it cites none of the ``noun``, it repeated itself."""
    flags = []
    if cites_nothing:
        flags.append(f"It cites none of the {noun}: check it against the {noun} themselves")
    if repeated:
        flags.append(f"The generator wrote {'a sentence' if repeated == 1 else f'{repeated} sentences'} again; each is shown once")
    return flags


@component
class GroundingCheck:
    """Passes a generated answer the reviews it cites support; otherwise returns the extractive answers in its place.

    :param min_support: the share of the answer's content words that must occur in the reviews it cites; each of its
        numbers must occur there too, and none of its sentences may be worded the other way round (``contradicted``).

    The generated answer gains ``meta["support"]``, ``meta["grounded"]`` and ``meta["flags"]`` (sentences for
    its reader: it cites no review, it repeated itself; ``grounding_flags``), its repeated sentences dropped;
    when it is withheld, each extractive answer returned carries ``meta["withheld"]``: the generated text, its
    support and the reason.

    Usage::

        check = GroundingCheck(min_support=0.75)
        generated = CitedAnswerBuilder().run(query=question, replies=replies, documents=prompted)["answers"]
        answers = check.run(answers=generated, extracted=selector_answers)["answers"]
    """

    def __init__(self, min_support: float = 0.75):
        self.min_support = check_number(min_support, "min_support", 0, maximum=1)

    def to_dict(self) -> dict[str, Any]:
        """The component's init parameters, as Haystack serialises a pipeline."""
        return default_to_dict(self, min_support=self.min_support)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GroundingCheck:
        """The component from ``to_dict``'s output."""
        return default_from_dict(cls, data)

    @component.output_types(answers=list)
    def run(self, answers: list[GeneratedAnswer], extracted: list[ExtractedAnswer]) -> dict[str, list]:
        """The generated answer when grounded (or "no answer"); else ``extracted``, each naming what was withheld."""
        generated = answers[0] if answers else None
        if generated is None or generated.data is None:
            return {"answers": answers}
        text, repeated = collapse_repetition(generated.data)
        given = list(generated.documents or [])
        cited = [d for d in given if d.meta.get("referenced")] or given
        share = support(text, cited)
        invented = unsupported_numbers(text, cited, generated.query or "")
        unmentioned = unmentioned_topics(text, cited, generated.query or "")
        bare = not content_words(claim_text(text))  # "No." or "Yes [1]": nothing the reviews could be seen to say
        same = [a for a in extracted if a.data and token_f1(a.data, strip_citations(text)) >= SAME_ANSWER_F1]
        said = not invented and not unmentioned and not bare and (share >= self.min_support or bool(same))
        reversed_claim = contradicted(text, cited) if said else None
        grounded = said and not reversed_claim
        noun = noun_of(given) or DOCUMENTS
        flags = grounding_flags(cited is given, repeated, noun)
        checked = replace(generated, data=text, meta={**generated.meta, "support": share, "grounded": grounded, "flags": flags})
        if grounded:
            return {"answers": [checked]}
        where = f"{noun} it cites" if cited is not given else f"{noun} given"
        reason = (
            f"it gives {', '.join(invented)}, which the {where} do not"
            if invented
            else f"it speaks of {', '.join(unmentioned)}, which the {where} do not mention"
            if unmentioned
            else f"it holds no word that the {where} could be seen to say (a yes or a no at most)"
            if bare
            else f'it says "{reversed_claim}" the other way round from the {where}'
            if said
            else f"only {share:.0%} of its content words occur in the {where} (at least {self.min_support:.0%} are needed), "
            "and no extractive answer says the same"
        )
        withheld = {
            "text": generated.data,
            "support": share,
            "reason": reason,
            "cited_document_ids": generated.meta.get("cited_document_ids", []),
        }
        return {"answers": [replace(a, meta={**a.meta, "withheld": withheld}) for a in extracted]}
