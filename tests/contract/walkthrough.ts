// The README walk-through, through a TypeScript client: types from
// openapi-typescript (schema.d.ts, generated from the committed
// openapi/openapi.json) and openapi-fetch, against a real `serve`.
// Type-checked with `tsc --noEmit`, then compiled and run with Node.js:
// QIWU_API and QIWU_TOKEN name the server and a super-admin token.

import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

// Node.js's globals, without its type package.
declare const process: {
  env: Record<string, string | undefined>;
  exitCode: number | undefined;
};

type Job = components["schemas"]["JobDto"];

function check(condition: unknown, what: string): asserts condition {
  if (!condition) {
    throw new Error(`typescript client walk-through: ${what}`);
  }
}

async function main(): Promise<void> {
  const base = process.env["QIWU_API"];
  const token = process.env["QIWU_TOKEN"];
  check(base && token, "QIWU_API and QIWU_TOKEN are set");
  const client = createClient<paths>({
    baseUrl: base,
    headers: { Authorization: `Bearer ${token}`, "Accept-Language": "en" },
  });

  // Which handlers can a job use, and with which params?
  const handlers = await client.GET("/api/handlers");
  check(handlers.data, `handlers: ${handlers.response.status}`);
  const echo = handlers.data.find((h) => h.name === "demo.echo");
  check(echo, "demo.echo is registered");
  check(echo.defaultParams["message"] === "hello", "demo.echo's default message");

  // What does an expression mean, and when does it fire?
  const preview = await client.POST("/api/cron/preview", {
    body: { cron: "0 0 9 * * 1-5", timezone: "Asia/Shanghai", count: 3 },
  });
  check(preview.data?.valid === true, "the expression is valid");
  check(
    preview.data.description === "At 09:00:00, Monday through Friday",
    `description: ${preview.data.description}`,
  );
  check(preview.data.nextFireTimes.length === 3, "three fire times");

  // Create a job with params (a free-form object), defaults fill the rest.
  const created = await client.POST("/api/jobs", {
    body: {
      name: "nightly echo (typescript)",
      handler: "demo.echo",
      cron: "0 30 3 * * *",
      params: { message: "hi" },
    },
  });
  check(created.response.status === 201, `create: ${created.response.status}`);
  check(created.data, "the created job");
  const job: Job = created.data;
  check(job.params["message"] === "hi" && job.params["delayMs"] === 0, "params with defaults");
  const id = job.id;

  // Its detail.
  const detail = await client.GET("/api/jobs/{id}", { params: { path: { id } } });
  check(detail.data?.cronDescription === "At 03:30:00, every day", "cron description");
  check(detail.data.nextFireTimes.length === 5, "five fire times");

  // Edit only the cron: a body without params compiles, and params are kept.
  const updated = await client.PUT("/api/jobs/{id}", {
    params: { path: { id } },
    body: { version: job.version, cron: "0 */10 * * * *" },
  });
  check(updated.data, `update: ${updated.response.status}`);
  check(updated.data.cron === "0 */10 * * * *", "the new cron");
  check(
    updated.data.params["message"] === "hi" && updated.data.params["delayMs"] === 0,
    `params after a cron-only update: ${JSON.stringify(updated.data.params)}`,
  );
  check(updated.data.version === job.version + 1, "the version moved on");

  // Run it once, three times, each after the last one's run succeeded (a
  // fire while the job runs would be skipped: it does not run concurrently).
  for (let i = 0; i < 3; i++) {
    const run = await client.POST("/api/jobs/{id}/run", { params: { path: { id } } });
    check(run.response.status === 202 && run.data, `run once: ${run.response.status}`);
    check(run.data.message === "Started: see the run log for the result", run.data.message);
    const fireId = run.data.fireId;
    const deadline = Date.now() + 30_000;
    for (;;) {
      const page = await client.GET("/api/runs", {
        params: { query: { jobId: id, limit: 100 } },
      });
      check(page.data, "the run log");
      if (page.data.items.some((r) => r.fireId === fireId && r.status === "success")) {
        break;
      }
      check(Date.now() < deadline, `fire ${fireId} succeeded within 30 s`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  // Page the run log by cursor.
  const first = await client.GET("/api/runs", { params: { query: { jobId: id, limit: 2 } } });
  check(first.data?.items.length === 2, "first page");
  const cursor = first.data.nextCursor;
  check(typeof cursor === "string", "a cursor to the next page");
  const second = await client.GET("/api/runs", {
    params: { query: { jobId: id, limit: 2, cursor } },
  });
  check(second.data?.items.length === 1, "second page");
  check(second.data.nextCursor == null, "the last page");
  const ids = new Set([...first.data.items, ...second.data.items].map((r) => r.id));
  check(ids.size === 3, "three distinct runs");
  const firstRun = first.data.items[0];
  check(firstRun, "a run");
  const run = await client.GET("/api/runs/{id}", { params: { path: { id: firstRun.id } } });
  check(run.data?.output.includes("hi"), "the run's output");

  // Export the run log as a workbook.
  const exported = await client.GET("/api/runs/export", {
    params: { query: { jobId: id } },
    parseAs: "arrayBuffer",
  });
  check(exported.response.status === 200 && exported.data, `export: ${exported.response.status}`);
  const magic = new Uint8Array(exported.data.slice(0, 4));
  check(magic[0] === 0x50 && magic[1] === 0x4b, "an .xlsx (zip) workbook");

  // Delete it.
  const deleted = await client.DELETE("/api/jobs/{id}", { params: { path: { id } } });
  check(deleted.response.status === 204, `delete: ${deleted.response.status}`);
  const gone = await client.GET("/api/jobs/{id}", { params: { path: { id } } });
  check(gone.response.status === 404 && gone.error?.status === 404, "a problem after delete");

  console.log("typescript client walk-through: ok");
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
