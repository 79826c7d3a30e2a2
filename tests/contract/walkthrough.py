"""The README walk-through, through the Python client openapi-python-client
generates from the committed openapi/openapi.json, against a real `serve`.

Usage: walkthrough.py BASE_URL TOKEN (the generated package `qiwu_client`
on PYTHONPATH). Exits non-zero at the first step that does not hold.
"""

import sys
import time
from http import HTTPStatus

from qiwu_client import AuthenticatedClient
from qiwu_client.api.cron import preview
from qiwu_client.api.handlers import list_handlers
from qiwu_client.api.jobs import (
    create_job,
    delete_job,
    export_jobs,
    get_job,
    run_once,
    update_job,
)
from qiwu_client.api.runs import export_runs, get_run, list_runs
from qiwu_client.models import (
    CronPreviewRequest,
    JobCreate,
    JobCreateParamsType0,
    JobDetailDto,
    JobDto,
    JobUpdate,
    Problem,
    RunDetailDto,
    RunOnceAccepted,
    RunPage,
    RunStatus,
)
from qiwu_client.types import UNSET, File


def check(condition, what):
    if not condition:
        raise SystemExit(f"python client walk-through: {what}")


def main(base, token):
    client = AuthenticatedClient(
        base_url=base,
        token=token,
        headers={"Accept-Language": "en"},
        raise_on_unexpected_status=True,
        timeout=30.0,
    )

    # Which handlers can a job use, and with which params?
    handlers = list_handlers.sync(client=client)
    echo = next(h for h in handlers if h.name == "demo.echo")
    check(
        echo.default_params.to_dict() == {"message": "hello", "delayMs": 0},
        f"demo.echo defaults: {echo.default_params.to_dict()}",
    )

    # What does an expression mean, and when does it fire?
    explained = preview.sync(
        client=client,
        body=CronPreviewRequest(cron="0 0 9 * * 1-5", timezone="Asia/Shanghai", count=3),
    )
    check(explained.valid is True, f"preview: {explained}")
    check(
        explained.description == "At 09:00:00, Monday through Friday",
        f"description: {explained.description}",
    )
    check(len(explained.next_fire_times) == 3, "three fire times")

    # Create a job with params; schema defaults fill the rest.
    created = create_job.sync_detailed(
        client=client,
        body=JobCreate(
            name="nightly echo (python)",
            handler="demo.echo",
            cron="0 30 3 * * *",
            params=JobCreateParamsType0.from_dict({"message": "hi"}),
        ),
    )
    check(created.status_code == HTTPStatus.CREATED, f"create: {created.status_code}")
    job = created.parsed
    check(isinstance(job, JobDto), f"create answered {job}")
    check(
        job.params.to_dict() == {"message": "hi", "delayMs": 0},
        f"params: {job.params.to_dict()}",
    )
    check(job.version == 1, "version 1")

    # Its detail: description, the next 5 fire times.
    detail = get_job.sync(client=client, id=job.id)
    check(isinstance(detail, JobDetailDto), f"detail: {detail}")
    check(detail.cron_description == "At 03:30:00, every day", detail.cron_description)
    check(len(detail.next_fire_times) == 5, "five fire times")

    # Edit only the cron: the params are kept (absent fields are not sent).
    updated = update_job.sync(
        client=client, id=job.id, body=JobUpdate(version=job.version, cron="0 */10 * * * *")
    )
    check(isinstance(updated, JobDto), f"update: {updated}")
    check(updated.cron == "0 */10 * * * *", updated.cron)
    check(
        updated.params.to_dict() == {"message": "hi", "delayMs": 0},
        f"params after a cron-only update: {updated.params.to_dict()}",
    )
    check(updated.version == 2, "version 2")

    # Run it once, three times, each after the last one's run succeeded (a
    # fire while the job runs would be skipped: it does not run concurrently).
    for _ in range(3):
        accepted = run_once.sync(client=client, id=job.id)
        check(isinstance(accepted, RunOnceAccepted), f"run once: {accepted}")
        check(accepted.message == "Started: see the run log for the result", accepted.message)
        deadline = time.monotonic() + 30
        while True:
            page = list_runs.sync(client=client, job_id=job.id, limit=100)
            check(isinstance(page, RunPage), f"runs: {page}")
            mine = [r for r in page.items if r.fire_id == accepted.fire_id]
            if mine and mine[0].status == RunStatus.SUCCESS:
                break
            check(time.monotonic() < deadline, f"fire {accepted.fire_id} succeeded: {mine}")
            time.sleep(0.1)

    # Page the run log by cursor.
    first = list_runs.sync(client=client, job_id=job.id, limit=2)
    check(len(first.items) == 2 and isinstance(first.next_cursor, str), "first page")
    second = list_runs.sync(client=client, job_id=job.id, limit=2, cursor=first.next_cursor)
    check(len(second.items) == 1, "second page")
    check(second.next_cursor is None or second.next_cursor is UNSET, "last page")
    ids = {r.id for r in first.items + second.items}
    check(len(ids) == 3, f"three distinct runs: {ids}")
    run = get_run.sync(client=client, id=first.items[0].id)
    check(isinstance(run, RunDetailDto) and "hi" in run.output, f"run detail: {run}")

    # Export both logs as workbooks.
    for answer in (
        export_runs.sync_detailed(client=client, job_id=job.id),
        export_jobs.sync_detailed(client=client, name="nightly echo (python)"),
    ):
        check(answer.status_code == HTTPStatus.OK, f"export: {answer.status_code}")
        check(isinstance(answer.parsed, File), f"export parsed as {type(answer.parsed)}")
        check(answer.parsed.payload.read(4) == b"PK\x03\x04", "an .xlsx (zip) workbook")

    # Delete it.
    deleted = delete_job.sync_detailed(client=client, id=job.id)
    check(deleted.status_code == HTTPStatus.NO_CONTENT, f"delete: {deleted.status_code}")
    gone = get_job.sync_detailed(client=client, id=job.id)
    check(gone.status_code == HTTPStatus.NOT_FOUND, f"after delete: {gone.status_code}")
    check(isinstance(gone.parsed, Problem) and gone.parsed.status == 404, "a problem")

    print("python client walk-through: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
