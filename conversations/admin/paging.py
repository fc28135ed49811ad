"""A paginator for tables with millions of rows.

Django's paginator runs COUNT(*) on every page, which on PostgreSQL reads the whole table
(or the whole filtered set). This one counts at most COUNT_CAP rows; beyond that it takes
the planner's row estimate (EXPLAIN's, which follows the table's statistics and its
current size). Page links past the true end then show an empty page rather than an
error, which is the price of never scanning everything to render page 1.
"""

import json
from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet

COUNT_CAP = 10_000


def _estimate(queryset: QuerySet[Any]) -> int:
    """The planner's estimate of the rows `queryset` matches (0 where there is none)."""
    if connections[queryset.db].vendor != "postgresql":
        return 0
    plan = json.loads(queryset.order_by().values("pk").explain(format="json"))
    return max(int(plan[0]["Plan"]["Plan Rows"]), 0)


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
