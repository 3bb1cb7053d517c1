"""Whether a text looks English, by its function words: the reader and the encoders were trained on English.

Answers to a German question, or read from Spanish documents, are less often right than their chances say (the
chances were calibrated on English reviews), so the index report and the answer cards say when a text looks like
another language. Function words are what tell: some 250 frequent ones of seven languages, each counted for
the languages whose list holds it and English does not ("die", "was" and "hat" are English words too). This is a
hint for a note, not a language detector: a text too short to tell, or of another language, is None.
"""

from __future__ import annotations

import re

ENGLISH = "English"
_ENGLISH_WORDS = set(
    """a about after all also am an and any are as at be been but by can could did do does don't for from had has have he her
    his how i if in into is it it's its just me more most my no not of on one only or our out she so some than that the their
    them then there these they this those to too up us very was we were what when where which while who why will with would
    you your""".split()
)
_OTHER_WORDS = {
    "German": """aber als auch auf aus bei beim bin bis das dass dem den der des dich die dir doch durch ein eine einem einen
        einer es für gibt hat ich ihr ist kann kein keine lange man mein meine mich mir mit nach nicht noch nur ob oder schon
        sehr sich sie sind über und viel von vom war was welche wenn wie wieviel wir wird zu zum zur""",
    "Spanish": """al cómo con cuál cuándo cuánto cuánta de del dónde el en es esta este está están hay la las lo los más muy
        para pero por porque puede qué se sin son su sus también tiene un una y""",
    "French": """au aux avec ce cette combien comment dans des du elle est et il ils je la le les mais ne nous ou où pas peut
        pour pourquoi quand que quel quelle qui sont sur très un une vous""",
    "Italian": """anche che come con della delle di dove è gli il la le lo ma molto non per perché può quale quando quanto
        questa questo sono un una""",
    "Portuguese": """as com como da das de do dos é está e em isso mais mas muito não no nos os para pode por qual quando
        quanto são sem também tem um uma""",
    "Dutch": """aan dat de een en er het hoe hoeveel ik kan maar met niet ook op te van voor waarom wat wordt zijn""",
}
# Each function word of another language than English, with the languages that use it ("de": Spanish, Portuguese, Dutch).
_LANGUAGES_OF: dict[str, list[str]] = {}
for _language, _words in _OTHER_WORDS.items():
    for _word in set(_words.split()) - _ENGLISH_WORDS:
        _LANGUAGES_OF.setdefault(_word, []).append(_language)
# A word, hyphenated ones whole: "e-ink", "non-stick" and "die-cast" hold no Portuguese "e", Italian "non" or German "die".
_WORD = re.compile(r"[^\W\d_]+(?:['\-][^\W\d_]+)*")
# Read of a long text: its first sentences hold enough function words to tell (and indexing counts every document).
SAMPLE_CHARS = 400


def guess_language(text: str, least: int = 2) -> str | None:
    """``ENGLISH``, another language's name ("German"), or None when the text holds too few function words to tell.

    Another language needs at least ``least`` of its function words and more than twice as many as English's.
    """
    english, counts = 0, dict.fromkeys(_OTHER_WORDS, 0)
    for word in _WORD.findall(text[:SAMPLE_CHARS].lower()):  # one pass: indexing 100,000 reviews counts them all
        if word in _ENGLISH_WORDS:
            english += 1
        for language in _LANGUAGES_OF.get(word, ()):
            counts[language] += 1
    language, found = max(counts.items(), key=lambda item: item[1])
    if found >= least and found > 2 * english:
        return language
    return ENGLISH if english >= least else None


def other_language(text: str) -> str | None:
    """The language ``text`` looks like when that is not English (None: English, or too short to tell)."""
    language = guess_language(text)
    return None if language in (None, ENGLISH) else language


def language_note(question: str, document: str | None = None) -> str:
    """A card's note when the question, else the answer's document, looks like another language than English; "" else."""
    for what, text in (("The question", question), ("Its document", document)):
        language = other_language(text) if text else None
        if language is not None:
            return (
                f"{what} looks {language}: the reader was trained on English, so its answers to other languages are less "
                "often right than their chances say."
            )
    return ""
