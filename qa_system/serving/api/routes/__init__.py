"""The API's routes, by what they serve: ``health`` (readiness and metrics), ``collections`` (collections,
products and, when on, the document routes), ``questions`` (/query) and ``feedback``. Each endpoint's
docstring is its description in the OpenAPI schema (/docs), in Markdown.
"""
