// Validates every PodMonitor in the JSON array on stdin (rendered manifests,
// converted by deploy/ci/run) with the Prometheus Operator's schema from
// @kubernetes-models/prometheus-operator. Exits 1 naming each invalid one.
import { readFileSync } from "node:fs";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";

const objects = JSON.parse(readFileSync(0, "utf8"));
let checked = 0;
let failed = 0;
for (const obj of objects) {
  if (obj.apiVersion !== "monitoring.coreos.com/v1" || obj.kind !== "PodMonitor") continue;
  checked += 1;
  try {
    new PodMonitor(obj).validate();
    console.log(`PodMonitor ${obj.metadata.name}: valid`);
  } catch (e) {
    failed += 1;
    console.error(`PodMonitor ${obj.metadata.name}: ${e.message}`);
  }
}
if (checked === 0) {
  console.error("no PodMonitor to validate");
  process.exit(1);
}
process.exit(failed === 0 ? 0 : 1);
