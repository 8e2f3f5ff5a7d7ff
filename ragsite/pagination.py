"""The API's list pages: DRF's limit / offset ({count, next, previous, results}), bounded.

Unbounded, `?limit=` or `?offset=` beyond the database's integer range made the query itself
fail (a 500 on SQLite and PostgreSQL alike), and a huge limit asked for every row at once.
"""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 200
# Far beyond any list's length and well inside a 64-bit OFFSET: past it a page is empty anyway.
MAX_OFFSET = 10**9


class Pagination(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_offset(self, request) -> int:
        return min(super().get_offset(request), MAX_OFFSET)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: {"minimum": 1, "maximum": self.max_limit}, self.offset_query_param: {"minimum": 0}}
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters
