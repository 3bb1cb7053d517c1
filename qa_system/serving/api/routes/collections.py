"""The collections served and their products; the document routes (``api/documents.py``) join them when on."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from qa_system.serving.api import documents as document_routes
from qa_system.serving.api.error_mapping import GUARDED, errors
from qa_system.serving.api.schemas import CollectionOut, Count, ProductOut, ProductsOut
from qa_system.serving.api.served_api import PROTECTED, Served
from qa_system.serving.api.strict_json import StrictJSONRoute

router = APIRouter(route_class=StrictJSONRoute)
documents_router = APIRouter(route_class=StrictJSONRoute)  # listed last in /docs


@router.get(
    "/collections",
    response_model=list[CollectionOut],
    dependencies=PROTECTED,
    tags=["data"],
    summary="the collections served, with their sizes",
    responses=errors(*GUARDED, 503),
)
async def collections_(api: Served) -> list[CollectionOut]:
    """Every collection served, the default one first."""
    return [CollectionOut.of(info) for info in api.loaded().collections()]


@router.get(
    "/products",
    response_model=ProductsOut,
    dependencies=PROTECTED,
    tags=["data"],
    summary="a collection's products with their review counts",
    responses=errors(*GUARDED, 404, 422, 503),
)
async def products(
    api: Served,
    collection: str | None = Query(None, description="default: the first collection served"),
    limit: Annotated[Count("limit", 1, 1000), Query(description="products to return")] = 100,
    offset: Annotated[Count("offset", 0), Query(description="products to skip")] = 0,
) -> ProductsOut:
    """One page of a collection's products, each with its number of reviews."""
    counts = api.loaded().products(collection)
    page = list(counts.items())[offset : offset + limit]
    name = collection or api.service.names[0]
    return ProductsOut(collection=name, total=len(counts), products=[ProductOut(item_id=i, reviews=n) for i, n in page])


document_routes.register(documents_router, PROTECTED, errors)
