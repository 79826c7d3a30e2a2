"""schemathesis hooks for the contract test.

A time range (`startedFrom`/`startedTo` of the run log and its export,
`from`/`to` of the audit log) whose end is before its start is a 400 by
design: it matches nothing and is almost always a mistake. Two separate
query parameters cannot say so in JSON Schema, so such cases are not
generated rather than reported as "valid request rejected".
"""

from datetime import datetime

import schemathesis

RANGES = (("startedFrom", "startedTo"), ("from", "to"))


def _instant(value):
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None


@schemathesis.hook
def filter_query(ctx, query):
    if not query:
        return True
    for start, end in RANGES:
        a, b = _instant(query.get(start)), _instant(query.get(end))
        if a is not None and b is not None and a.tzinfo and b.tzinfo and a > b:
            return False
    return True


XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


@schemathesis.deserializer(XLSX)
def xlsx(ctx, response):
    """An export is an Excel workbook: a zip archive. Anything else fails
    the response check; the bytes then stand for the binary string the
    document describes."""
    body = response.content
    if not body.startswith(b"PK\x03\x04"):
        raise ValueError("the export is not an .xlsx (zip) workbook")
    return body.decode("latin-1")
