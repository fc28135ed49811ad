"""A paginator for tables with millions of rows.

Django's paginator runs COUNT(*) on every page, which on PostgreSQL reads the whole table
(or the whole filtered set). This one counts at most COUNT_CAP rows; beyond that it takes
the planner's estimate (pg_class.reltuples for the unfiltered table, EXPLAIN's row
estimate for a filtered one). Page links past the true end then show an empty page rather
than an error, which is the price of never scanning everything to render page 1.
"""

import json
from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet

COUNT_CAP = 10_000


def _estimate(queryset: QuerySet[Any]) -> int:
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return 0
    query = queryset.order_by()
    if not query.query.where:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [queryset.model._meta.db_table],
            )
            row = cursor.fetchone()
        return max(int(row[0]), 0) if row else 0
    sql, params = query.values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):
    @cached_property
    def count(self) -> int:
        object_list = self.object_list
        if not isinstance(object_list, QuerySet):
            return len(object_list)
        exact = object_list.order_by().values("pk")[: COUNT_CAP + 1].count()
        if exact <= COUNT_CAP:
            return exact
        return max(_estimate(object_list), exact)
