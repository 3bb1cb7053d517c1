"""Changes to a collection besides reading a source into it: create an empty one, and delete documents
by id or by a metadata filter. The REST API's document routes call these (and ``ingest`` to add or
update documents); they take turns with ingestions into the same collection (the same file lock).

A deleted document goes with all its passages (a filter that matches one passage of a long document
deletes that document); the manifest's counts (documents, products) follow, and the collection is
saved the way every index is (``stores.save_index``: atomically for the files of the memory and FAISS
stores; Elasticsearch and OpenSearch delete in place).
"""

from __future__ import annotations

import io
import json
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qa_system.config import Settings
from qa_system.disk_cache import taking_turns
from qa_system.errors import Conflict, NotFound, QAError, check_text, json_kind, shown
from qa_system.ingestion.backends import commit
from qa_system.ingestion.collections import check_collection_name, check_not_a_domain, ingestion_lock
from qa_system.ingestion.indexing import MIN_KEPT_SHARE
from qa_system.stores import Index, save_index, saved_manifest, try_open_index
from qa_system.stores.filter_checks import check_collection_filters

# Most documents one request may add as JSON, or delete by id: larger sets are files (`index --input`, an upload).
MAX_DOCUMENTS = 10_000
DELETE_BATCH = 500


@dataclass
class DeleteReport:
    """What a deletion did: the documents (and passages) deleted, the ids asked for that the collection did not hold, and what is left."""

    collection: str
    deleted: list[str] = field(default_factory=list)
    passages_deleted: int = 0
    not_found: list[str] = field(default_factory=list)
    documents: int = 0
    passages: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return asdict(self)


def _unknown_collection(settings: Settings, name: str) -> NotFound:
    """No collection ``name`` to change, in the words of a Python caller (the REST API says it in its own first)."""
    return NotFound(
        f"No {settings.store} collection named '{shown(name)}'.",
        "name one that list_collections(settings) lists, or index it first (ingest).",
    )


def create_collection(settings: Settings, name: str) -> dict:
    """Create the empty collection ``name`` (documents are added to it afterwards); a ``Conflict`` when it exists."""
    check_collection_name(name)
    with taking_turns(ingestion_lock(settings, name), f"Waiting for another change to '{name}' to finish.", remove=True):
        if saved_manifest(settings, name) is not None:
            raise Conflict(f"A collection named '{name}' exists already.", "add documents to it, or pick another name.")
        check_not_a_domain(settings, name)
        now = datetime.now(UTC).isoformat()
        manifest = {
            "input": {"source": "documents added over HTTP"},
            "created": now,
            "updated": now,
            "source_documents": 0,
            "item_counts": {},
            "meta_types": {},
        }
        staging = settings.index_dir / "staging"
        staging.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=staging, prefix=".empty-", suffix=".jsonl") as empty:
            commit(settings, name, Path(empty.name), set(), [], manifest, rebuild=True)
    return manifest


def documents_file(rows: Sequence[Any]) -> io.BytesIO:
    """Documents sent as JSON objects, as the JSON lines file `index --input` reads (each object a line, the first one's keys the columns)."""
    if not isinstance(rows, list) or not rows:
        raise QAError(
            "'documents' is empty or not a list.", 'send {"documents": [{"id": "r1", "text": "...", "item_id": "P1", "rating": 5}, ...]}.'
        )
    if len(rows) > MAX_DOCUMENTS:
        raise QAError(
            f"{len(rows)} documents in one request; at most {MAX_DOCUMENTS} are taken.", "send them in several requests, or as a file."
        )
    lines = []
    for position, row in enumerate(rows):
        if not isinstance(row, dict):
            raise QAError(
                f"documents[{position}] is {json_kind(row)}, not an object.", 'send objects such as {"text": "...", "rating": 5}.'
            )
        line = json.dumps(row, ensure_ascii=False)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # JSON's "\ud800" escape: half a character, which no file, tokenizer or response can hold
            _check_strings(row, f"documents[{position}]")
        lines.append(line)
    return io.BytesIO(("\n".join(lines) + "\n").encode("utf-8"))


def _check_strings(value: Any, where: str) -> None:
    """A QAError naming the first key or text inside ``value`` (a document sent as JSON) that is not UTF-8 text."""
    if isinstance(value, str):
        check_text(value, f"the value {where}")
    elif isinstance(value, dict):
        for key, inner in value.items():
            check_text(key, f"a key of {where}")
            _check_strings(inner, f"{where}[{json.dumps(key)}]")
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            _check_strings(inner, f"{where}[{position}]")


def _document_ids(index: Index, filters: dict) -> set[str]:
    return {passage.meta.get("document_id", passage.id) for passage in index.store.filter_documents(filters)}


def delete_documents(
    settings: Settings, name: str, ids: Sequence[str] | None = None, filters: dict | None = None, force: bool = False
) -> DeleteReport:
    """Delete the documents ``ids`` (their source ids), or those with a passage that ``filters`` matches, with all their
    passages. A filter that would leave fewer than ``MIN_KEPT_SHARE`` of the documents (a mistyped filter can match them
    all) is refused unless ``force``, as a sync is."""
    check_collection_name(name)
    if (ids is None) == (filters is None):
        raise QAError(
            "Name the documents to delete by 'ids' or by 'filters' (one of them).",
            'give e.g. ids ["r1", "r2"], or filters {"field": "meta.rating", "operator": "<", "value": 2}.',
        )
    if ids is not None and (not isinstance(ids, list) or not ids or len(ids) > MAX_DOCUMENTS or not all(isinstance(i, str) for i in ids)):
        raise QAError(f"'ids' must be a list of 1 to {MAX_DOCUMENTS} document ids (text).", 'give a list such as ["r1", "r2"].')
    for document_id in ids or []:
        check_text(document_id, "a document id")
    with taking_turns(ingestion_lock(settings, name), f"Waiting for another change to '{name}' to finish.", remove=True):
        index = try_open_index(settings, name)
        if index is None:
            raise _unknown_collection(settings, name)
        if index.manifest.get("domains"):
            raise QAError(
                f"'{name}' is the SubjQA collection that `qa-system index --domain` builds; its documents are not changed one by one.",
                "change your own collections only.",
            )
        report = DeleteReport(name)
        if ids is not None:
            found = _document_ids(index, {"field": "meta.document_id", "operator": "in", "value": list(ids)})
            report.not_found = [i for i in ids if i not in found]
        else:
            found = _document_ids(index, check_collection_filters(filters, index.manifest))
            held = int(index.manifest.get("source_documents", 0))
            if not force and held and held - len(found) < MIN_KEPT_SHARE * held:
                raise QAError(
                    f"The filter matches {len(found)} of the {held} documents of collection '{name}': deleting them would leave "
                    f"{held - len(found)}; nothing was deleted.",
                    'check the filter, or delete them anyway with force (force=True in Python, "force": true over HTTP).',
                )
        _delete(index, settings, sorted(found), report)
    return report


def _delete(index: Index, settings: Settings, documents: list[str], report: DeleteReport) -> None:
    """Delete every passage of ``documents`` and save the collection with its counts brought up to date."""
    passages = index.store.filter_documents({"field": "meta.document_id", "operator": "in", "value": documents}) if documents else []
    items = Counter(
        item for item in {p.meta.get("document_id", p.id): p.meta.get("item_id") for p in passages}.values() if item is not None
    )
    for begin in range(0, len(passages), DELETE_BATCH):
        index.store.delete_documents([p.id for p in passages[begin : begin + DELETE_BATCH]])
    report.deleted, report.passages_deleted = documents, len(passages)
    manifest = index.manifest
    counts = Counter(manifest.get("item_counts", {}))
    counts.subtract(items)
    report.passages = manifest["documents"] = index.store.count_documents()
    report.documents = manifest["source_documents"] = max(0, int(manifest.get("source_documents", 0)) - len(documents))
    manifest.update(item_counts={item: n for item, n in counts.items() if n > 0}, updated=datetime.now(UTC).isoformat())
    types = manifest.get("meta_types")
    if types:  # a field only deleted documents held: no filter may name it, and new values may take another type
        gone = {key for passage in passages for key in passage.meta if key in types and not _held(index, key)}
        manifest["meta_types"] = {key: kind for key, kind in types.items() if key not in gone}
    if documents:
        save_index(index, settings)


def _held(index: Index, key: str) -> bool:
    """Whether a document of ``index`` holds the metadata field ``key``."""
    holding = {"field": f"meta.{key}", "operator": "!=", "value": None}
    count = getattr(index.store, "count_documents_by_filter", None)  # the search servers count without reading
    return (count(holding) if count is not None else len(index.store.filter_documents(holding))) > 0
