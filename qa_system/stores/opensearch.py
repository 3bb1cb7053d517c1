"""The OpenSearch store: an alias over one concrete index, moved to a complete new one in one atomic step."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import time
from datetime import UTC
from typing import Any
from urllib.parse import urlsplit

from qa_system.config import Settings
from qa_system.errors import Conflict, QAError, Unavailable, https_refused
from qa_system.safe_text import public_url
from qa_system.stores.index import MANIFEST_KEY, Index

logger = logging.getLogger(__name__)

# The index name is an alias over one concrete index, ``<name>--<utc time>-<random>``. Building an
# index writes a new concrete index beside the one in service and then moves the alias in one
# atomic ``_aliases`` call: searches see the old reviews until the new ones are complete, a failed
# run leaves the old index serving (its half-written successor is deleted), and reviews missing
# from the new corpus are gone after the swap. That call also deletes the indices the run started from
# (``BASE_KEY``), so it fails whole when another writer (a process with another QA_HOME, on another
# machine: no file lock reaches it) swapped them out meanwhile: its change is never overwritten, and
# this run's is refused (``changed_meanwhile``) rather than lost or served twice. Servers without the k-NN plugin (e.g. Elasticsearch 7
# OSS, which the tests run) get an index without vectors: BM25 works, dense retrieval says why not.
# A run killed or cut off from the server leaves its concrete index behind, served by no alias: it is
# listed as no collection, and the next run into that collection (or its deletion) removes it once its
# run is over (``remove_leftover_indices``).

# The name of a concrete index (``new_opensearch_index``): no collection may be named so, or it would address
# another collection's index, and its first write would replace that index by an alias (see _save_opensearch).
CONCRETE_INDEX_NAME = re.compile(r".+--\d{14}-[0-9a-f]{6}")

# The process that made a concrete index, in its mapping's _meta: a leftover of a process that has ended is removed at once.
OWNER_KEY = "qa_system_owner"
# A leftover whose maker cannot be told dead (another machine, an older release) is removed after this long:
# no run takes a day between creating its index and swapping it in.
ABANDONED_AFTER_S = 24 * 3600
# The indices the alias served when a concrete index was made, each with its manifest's fingerprint, in the new
# index's mapping's _meta: its swap goes ahead only if they still serve, unchanged, and are deleted in the same step.
BASE_KEY = "qa_system_base"
# The concrete indices this process is building now: never a leftover, whatever their owner says.
_BUILDING: set[str] = set()


OPENSEARCH_FIX = "start an OpenSearch server there, or set QA_OPENSEARCH_URL (--opensearch-url) to a running one."
# BM25 as the memory store's bm25s defaults (see retrieval/bm25.py): English (Snowball) stemming,
# stopwords kept, hyphenated words joined too, k1 1.2, b 1.0; one shard, so that term statistics are corpus-wide as there.
# A hyphenated word's joined form added beside it ("wi-fi" is also "wifi"), as retrieval/bm25.py's Analyzer does.
OPENSEARCH_ANALYZER = {"char_filter": ["hyphenated_joined"], "tokenizer": "standard", "filter": ["lowercase", "porter2_english"]}
OPENSEARCH_SETTINGS = {
    "index": {
        "number_of_shards": 1,
        "similarity": {"default": {"type": "BM25", "k1": 1.2, "b": 1.0}},
        "analysis": {
            "char_filter": {
                "hyphenated_joined": {
                    "type": "pattern_replace",
                    "pattern": "(?<![A-Za-z0-9])([A-Za-z][A-Za-z0-9]*)-([A-Za-z][A-Za-z0-9]*)(?![A-Za-z0-9])",
                    "replacement": "$1-$2 $1$2",
                }
            },
            "filter": {"porter2_english": {"type": "stemmer", "language": "porter2"}},
            "analyzer": {"default": OPENSEARCH_ANALYZER},
        },
    }
}
# Unit-length vectors (embed_documents normalises), compared by cosine; the Lucene engine filters
# inside the k-NN search (efficient filtering), so a product's reviews are found however few.
OPENSEARCH_KNN_METHOD = {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}


def _opensearch_auth() -> list[str] | None:
    """The credentials the OpenSearch integration reads (OPENSEARCH_USERNAME / OPENSEARCH_PASSWORD), if set."""
    from haystack.utils.auth import Secret

    username = Secret.from_env_var("OPENSEARCH_USERNAME", strict=False).resolve_value()
    password = Secret.from_env_var("OPENSEARCH_PASSWORD", strict=False).resolve_value()
    return [username, password] if username and password else None


def opensearch_client(settings: Settings):
    """An OpenSearch client on ``settings.opensearch_url``, after checking that the server answers."""
    from opensearchpy import OpenSearch
    from opensearchpy.exceptions import (
        AuthenticationException,
        AuthorizationException,
        ConnectionError,
        SerializationError,
        SSLError,
        TransportError,
    )

    url = settings.opensearch_url
    shown_url = public_url(url)  # a password in it is never shown (/health answers without a token)

    def not_opensearch(why: str) -> QAError:
        return QAError(
            f"{shown_url} answered, but not as OpenSearch does ({why}).",
            "set QA_OPENSEARCH_URL (--opensearch-url) to your OpenSearch server's URL.",
        )

    try:
        info = OpenSearch(hosts=url, http_auth=_opensearch_auth(), timeout=5, max_retries=0).info()
    except (AuthenticationException, AuthorizationException) as error:
        # A 401 or 403 may come from OpenSearch's security or from another server asking for a password (a wrong URL).
        other_server = "or, if it is not your OpenSearch server, set QA_OPENSEARCH_URL (--opensearch-url) to that server's URL."
        if _opensearch_auth() is None and not urlsplit(url).username:  # a user in the URL is one too
            raise QAError(
                f"{shown_url} refused the request ({error.status_code}) without a user name and password.",
                f"set OPENSEARCH_USERNAME and OPENSEARCH_PASSWORD to a user of that server, {other_server}",
            ) from None
        raise QAError(
            f"{shown_url} refused the user named in the URL or OPENSEARCH_USERNAME ({error.status_code}).",
            f"check the user and password (in the URL, or OPENSEARCH_USERNAME and OPENSEARCH_PASSWORD) and that user's permissions, "
            f"{other_server}",
        ) from None
    except SSLError as error:  # it answered, but no https as asked: a plain-HTTP server, or a certificate not trusted here
        raise https_refused(shown_url, str(error.error), "QA_OPENSEARCH_URL or --opensearch-url") from None
    except ConnectionError:  # refused, timed out, no such host
        raise Unavailable(f"OpenSearch at {shown_url} is unreachable.", OPENSEARCH_FIX) from None
    except TransportError as error:  # an HTTP error status (a proxy's 502, a web server's 404)
        if isinstance(error.status_code, int):
            raise not_opensearch(f"HTTP {error.status_code}") from None
        raise Unavailable(f"OpenSearch at {shown_url} is unreachable.", OPENSEARCH_FIX) from None
    except SerializationError:  # a web page
        raise not_opensearch("its reply is no JSON") from None
    except Exception:  # the client raises many types for bad URLs
        raise Unavailable(f"OpenSearch at {shown_url} is unreachable.", OPENSEARCH_FIX) from None
    # Every other answer would be read as an index listing, a mapping or a hit list: tracebacks far from here.
    if not (isinstance(info, dict) and isinstance(info.get("version"), dict) and info["version"].get("number")):
        raise not_opensearch("no version in its reply to GET /")
    return OpenSearch(hosts=url, http_auth=_opensearch_auth(), timeout=60)


def opensearch_has_knn(client) -> bool:
    """Whether the server has the k-NN plugin (vector fields and search); Elasticsearch OSS has not."""
    try:
        plugins = client.cat.plugins(format="json")
    except Exception:  # managed services may forbid _cat/plugins; they ship k-NN
        return True
    return any("knn" in str(plugin.get("component", "")) for plugin in plugins)


def opensearch_index_body(embedding_dim: int | None) -> dict:
    """Settings and mappings of a new concrete index; a k-NN vector field when ``embedding_dim`` is given."""
    mappings: dict[str, Any] = {
        "properties": {"content": {"type": "text"}},
        # Metadata strings (item_id, split, ...) are exact-match keywords, as the integration maps them.
        "dynamic_templates": [{"strings": {"match_mapping_type": "string", "mapping": {"type": "keyword"}}}],
    }
    settings = json.loads(json.dumps(OPENSEARCH_SETTINGS))
    if embedding_dim is not None:
        mappings["properties"]["embedding"] = {"type": "knn_vector", "dimension": embedding_dim, "method": OPENSEARCH_KNN_METHOD}
        settings["index"]["knn"] = True
    return {"settings": settings, "mappings": mappings}


# How long a request may wait for the search server: a collection being built sends bulk writes of a batch, one served
# answers questions, which a hung server would hold for a minute and more (and the API's worker with them).
BUILD_TIMEOUT_S = 60
SERVE_TIMEOUT_S = 15


def _opensearch_document_store(settings: Settings, index: str, body: dict | None = None, timeout: int = SERVE_TIMEOUT_S):
    from qa_system.stores.opensearch_store import CheckedOpenSearchDocumentStore

    body = body or {}
    dim = body.get("mappings", {}).get("properties", {}).get("embedding", {}).get("dimension", 768)
    # create_index=False: opening a name must never create an index (it would take the alias's name).
    return CheckedOpenSearchDocumentStore(
        hosts=settings.opensearch_url,
        index=index,
        create_index=False,
        embedding_dim=dim,
        mappings=body.get("mappings"),
        settings=body.get("settings"),
        timeout=timeout,
    )


def _store_index(store) -> str:
    return store.to_dict()["init_parameters"]["index"]


def new_opensearch_index(settings: Settings, name: str, embedding_dim: int | None):
    """A store on a new, empty concrete index beside the alias ``name`` (which it does not touch yet)."""
    from datetime import datetime
    from uuid import uuid4

    client = opensearch_client(settings)
    if embedding_dim is not None and not opensearch_has_knn(client):
        raise QAError(
            f"OpenSearch at {public_url(settings.opensearch_url)} has no k-NN plugin, so it cannot store review vectors.",
            "index without vectors (--no-embed) or use a server with the k-NN plugin.",
        )
    for leftover in remove_leftover_indices(settings, name, client):
        logger.info("Removed %s, the search server index an unfinished ingestion into '%s' left.", leftover, name)
    concrete = f"{name}--{datetime.now(UTC):%Y%m%d%H%M%S}-{uuid4().hex[:6]}"
    body = opensearch_index_body(embedding_dim)
    _BUILDING.add(concrete)
    base = {served: _manifest_fingerprint(client, served) for served in _aliased_indices(client, name)}
    owned = {**body, "mappings": {**body["mappings"], "_meta": {OWNER_KEY: _this_process(), BASE_KEY: base}}}
    client.indices.create(index=concrete, body=owned)
    return _opensearch_document_store(settings, concrete, body, BUILD_TIMEOUT_S)


def _machine() -> str:
    """This machine and its process-id namespace (a container has its own): where a process id means one process."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()} {namespace}".strip()


def _this_process() -> dict:
    return {"machine": _machine(), "pid": os.getpid()}


def _ended(owner: object, concrete: str) -> bool:
    """Whether the process ``owner`` names, which made ``concrete``, is no longer building it: one of this machine's
    that has ended, or this process when it is not building it now (its swap or its deletion was cut off)."""
    if not isinstance(owner, dict) or owner.get("machine") != _machine() or not isinstance(owner.get("pid"), int):
        return False
    if owner["pid"] == os.getpid():
        return concrete not in _BUILDING
    if os.name != "posix":  # os.kill(pid, 0) is no probe there
        return False
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def remove_leftover_indices(settings: Settings, name: str, client=None) -> list[str]:
    """Delete the concrete indices of collection ``name`` that no alias serves and whose run is over (its process
    ended, or it is older than ``ABANDONED_AFTER_S``): what runs killed or cut off from the server left. Returns them."""
    client = client or opensearch_client(settings)
    own = re.compile(rf"{re.escape(name)}--\d{{14}}-[0-9a-f]{{6}}")
    removed = []
    for concrete, entry in client.indices.get(index=f"{name}--*").items():
        if not own.fullmatch(concrete) or entry.get("aliases"):
            continue
        owner = entry.get("mappings", {}).get("_meta", {}).get(OWNER_KEY)
        created_s = int(entry.get("settings", {}).get("index", {}).get("creation_date", time.time() * 1000)) / 1000
        if _ended(owner, concrete) or time.time() - created_s > ABANDONED_AFTER_S:
            client.indices.delete(index=concrete, ignore_unavailable=True)
            removed.append(concrete)
    return removed


def discard_opensearch_index(settings: Settings, store) -> None:
    """Delete a concrete index that never went into service (a failed build); best effort, the build's error matters more.
    One that an alias serves stays: its swap took effect though its answer was lost, so it is the collection now."""
    from opensearchpy import OpenSearch
    from opensearchpy.exceptions import ConnectionError as NoAnswer

    concrete = _store_index(store)
    _BUILDING.discard(concrete)
    name = concrete.rsplit("--", 1)[0]
    try:
        client = OpenSearch(hosts=settings.opensearch_url, http_auth=_opensearch_auth(), timeout=10, max_retries=0)
        if client.indices.get_alias(index=concrete, ignore_unavailable=True).get(concrete, {}).get("aliases"):
            return
        client.indices.delete(index=concrete, ignore_unavailable=True)
    except NoAnswer:  # the run's own error says so; no run ever serves this index unless its swap took effect
        logger.info("The unfinished index %s stays on the search server until the next ingestion into '%s'.", concrete, name)
    except Exception as error:  # noqa: BLE001
        logger.warning("Could not delete the unfinished index %s (%s); the next ingestion into '%s' removes it.", concrete, error, name)


def saving_stopped(settings: Settings, name: str) -> Unavailable:
    """The error of a run whose search server stopped answering before its collection was saved: the alias still serves
    the complete index it served (or already the new one, when only the answer to the swap was lost)."""
    return Unavailable(
        f"The search server at {public_url(settings.opensearch_url)} stopped answering while collection '{name}' was being saved; "
        "nothing already indexed was lost.",
        "once it answers, run the same command (or request) again.",
    )


def _aliased_indices(client, name: str) -> list[str]:
    """The concrete indices behind alias ``name`` (none when it does not exist or is a plain index)."""
    from opensearchpy.exceptions import NotFoundError

    try:
        return sorted(client.indices.get_alias(name=name))
    except NotFoundError:
        return []


def _check_not_behind_an_alias(client, name: str) -> None:
    """A QAError when ``name`` is a concrete index that an alias serves: another collection's, never one of its own."""
    from opensearchpy.exceptions import NotFoundError

    try:
        aliases = (
            client.indices.get_alias(index=name).get(name, {}).get("aliases", {})
        )  # keyed by ``name`` only when it is a concrete index
    except NotFoundError:
        return
    if aliases:
        owner = sorted(aliases)[0]
        raise QAError(
            f"'{name}' is the search server index behind the collection '{owner}', not a collection.",
            f"use the collection's name, '{owner}'.",
        )


def delete_opensearch_index(settings: Settings, name: str) -> None:
    """Remove the alias ``name`` and the concrete indices behind it (or a plain index of that name, never one an alias serves),
    and what unfinished runs into it left."""
    client = opensearch_client(settings)
    aliased = _aliased_indices(client, name)
    if not aliased:
        _check_not_behind_an_alias(client, name)
    for concrete in aliased or [name]:
        client.indices.delete(index=concrete, ignore_unavailable=True)
    remove_leftover_indices(settings, name, client)


def _load_opensearch(settings: Settings, name: str) -> Index | None:
    client = opensearch_client(settings)
    if not client.indices.exists(index=name):
        return None
    mapping = client.indices.get_mapping(index=name)
    concrete = next(iter(mapping))  # keyed by the concrete index behind the alias
    if concrete == name:  # a plain index: served as a collection only when no alias serves it as another one
        _check_not_behind_an_alias(client, name)
    manifest = mapping[concrete]["mappings"].get("_meta", {}).get(MANIFEST_KEY)
    if manifest is None and client.count(index=name)["count"] == 0:
        return None
    dim = mapping[concrete]["mappings"].get("properties", {}).get("embedding", {}).get("dimension")
    return Index("opensearch", name, _opensearch_document_store(settings, name, opensearch_index_body(dim)), manifest or {})


def _save_opensearch(index: Index, settings: Settings) -> None:
    from opensearchpy.exceptions import ConnectionError as NoAnswer, TransportError

    from qa_system.stores.opensearch_store import refused_writes

    try:
        _swap_in(opensearch_client(settings), index, settings)
    except (NoAnswer, Unavailable):  # a refused connection, a timeout: the alias serves what it served, or the swap took effect
        raise saving_stopped(settings, index.name) from None
    except TransportError as error:
        if (blocked := refused_writes(error)) is not None:  # the alias serves what it served
            raise blocked from None
        raise


def _manifest_fingerprint(client, concrete: str) -> str:
    """A digest of the manifest in ``concrete``'s mapping: every save of a collection changes it (its counts, its time)."""
    meta = next(iter(client.indices.get_mapping(index=concrete).values()), {}).get("mappings", {}).get("_meta", {})
    return hashlib.sha256(json.dumps(meta.get(MANIFEST_KEY), sort_keys=True, default=str).encode()).hexdigest()


def changed_meanwhile(settings: Settings, name: str) -> Conflict:
    """The error of a run whose collection another writer saved while it ran: nothing of this run was saved."""
    return Conflict(
        f"Collection '{name}' was changed by another writer while this change ran (a server or command with another "
        f"QA_HOME, using the search server at {public_url(settings.opensearch_url)}); nothing of this change was saved, and theirs is kept.",
        "run the change again: it starts from the collection as it is now.",
    )


def _swap_in(client, index: Index, settings: Settings) -> None:
    """Save the manifest into the index's store and move the alias to it, deleting the indices it served (``BASE_KEY``)."""
    from opensearchpy.exceptions import NotFoundError

    target = _store_index(index.store)
    meta = next(iter(client.indices.get_mapping(index=target).values()), {}).get("mappings", {}).get("_meta", {})
    base = meta.pop(BASE_KEY, None)
    client.indices.put_mapping(index=target, body={"_meta": {**meta, MANIFEST_KEY: index.manifest}})  # _meta is replaced whole
    client.indices.refresh(index=target)
    if target == index.name:  # the index in service (e.g. a manifest update): nothing to swap
        return
    served = _aliased_indices(client, index.name)
    if base is None:  # an index made without a base (an older release's): it replaces what serves now
        base = dict.fromkeys(served)
    elif sorted(served) != sorted(base) or any(
        fingerprint is not None and _manifest_fingerprint(client, old) != fingerprint for old, fingerprint in base.items()
    ):
        raise changed_meanwhile(settings, index.name)
    actions = [{"remove_index": {"index": old}} for old in base]
    actions.append({"add": {"index": target, "alias": index.name}})
    if not base and client.indices.exists(index=index.name):
        _check_not_behind_an_alias(client, index.name)
        actions.append({"remove_index": {"index": index.name}})  # a plain index of that name: replaced in the same step
    try:
        client.indices.update_aliases(body={"actions": actions})
    except NotFoundError:  # an index of the base deleted since the check: another writer's swap
        raise changed_meanwhile(settings, index.name) from None
    _BUILDING.discard(target)
    index.store = _opensearch_document_store(settings, index.name, opensearch_index_body(index.manifest.get("embedding_dim")))
