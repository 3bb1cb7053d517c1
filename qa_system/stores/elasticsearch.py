"""The Elasticsearch store: documents in a server's index, the manifest in the index mapping's ``_meta``."""

from __future__ import annotations

from urllib.parse import urlsplit

from qa_system.config import Settings
from qa_system.errors import QAError, Unavailable, https_refused
from qa_system.safe_text import public_url
from qa_system.stores.index import MANIFEST_KEY, Index


def elasticsearch_client(settings: Settings):
    """An Elasticsearch client on ``settings.es_url``, after checking that an Elasticsearch 8 server answers there."""
    from elastic_transport import TlsError
    from elasticsearch import AuthenticationException, AuthorizationException, Elasticsearch, UnsupportedProductError

    fix = "start it with `docker compose up -d elasticsearch` or set QA_ES_URL to a running server."
    shown_url = public_url(settings.es_url)
    try:
        client = Elasticsearch(settings.es_url, request_timeout=5)
        client.info()
    except (AuthenticationException, AuthorizationException) as error:  # its security, or another server asking for a password
        with_user = "the user in the URL" if urlsplit(settings.es_url).username else "a request without a user name and password"
        raise QAError(
            f"{shown_url} refused {with_user} ({error.meta.status}).",
            "give a user of that server in the URL (http://USER:PASSWORD@host:9200, QA_ES_URL or --es-url), or, if it is not your "
            "Elasticsearch server, set QA_ES_URL to that server's URL.",
        ) from None
    except TlsError as error:  # https asked of a plain-HTTP server, or a certificate not trusted here
        raise https_refused(shown_url, str(error), "QA_ES_URL or --es-url") from None
    except UnsupportedProductError:  # it answers, as a server this client does not take (Elasticsearch 7, OpenSearch)
        raise QAError(
            f"The server at {public_url(settings.es_url)} is {_server_name(settings.es_url)}, which the elasticsearch store cannot use (it needs Elasticsearch 8).",
            "use --store opensearch (QA_STORE=opensearch, QA_OPENSEARCH_URL) for OpenSearch and Elasticsearch 7, or point QA_ES_URL at Elasticsearch 8.",
        ) from None
    except Exception:  # the client raises many types for bad URLs and refused connections
        raise Unavailable(f"Elasticsearch at {shown_url} is unreachable.", fix) from None
    return Elasticsearch(settings.es_url, request_timeout=60)


def _server_name(url: str) -> str:
    """What the server at ``url`` says it is ("Elasticsearch 7.9.2", "OpenSearch 2.11.0"), from its root document."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            version = json.loads(response.read(100_000))["version"]
    except Exception:  # any answer but the usual root document
        return "another search server"
    product = "OpenSearch" if version.get("distribution") == "opensearch" else "Elasticsearch"
    return f"{product} {version.get('number', '')}".strip()


def elasticsearch_store(settings: Settings, name: str):
    """An ElasticsearchDocumentStore on ``settings.es_url``, after checking the server answers."""
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    elasticsearch_client(settings)
    return ElasticsearchDocumentStore(hosts=settings.es_url, index=name, embedding_similarity_function="cosine")


def _load_elasticsearch(settings: Settings, name: str) -> Index | None:
    store = elasticsearch_store(settings, name)
    if store.count_documents() == 0:
        return None
    mapping = store.client.indices.get_mapping(index=name)
    manifest = mapping[name]["mappings"].get("_meta", {}).get(MANIFEST_KEY, {})
    return Index("elasticsearch", name, store, manifest)


def _save_elasticsearch(index: Index, settings: Settings) -> None:
    # Documents are already written (with deterministic ids, so a re-index overwrites in place);
    # the manifest lives in the index mapping's _meta so that every client sees the same one.
    index.store.client.indices.put_mapping(index=index.name, meta={MANIFEST_KEY: index.manifest})
    index.store.client.indices.refresh(index=index.name)
