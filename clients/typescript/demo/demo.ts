/**
 * The browser demo (demo/index.html, served by `python -m pipelines.collect --demo_page clients/typescript`):
 * reads the collector's task (GET /v1/task), encodes the value a person picks, or N simulated clients'
 * values, with the TypeScript client and WebCrypto randomness, and posts the JSON form to POST /v1/reports.
 *
 * What the page sent is kept in `window.ldpDemo.tally` (and shown on the page): requests answered, accepted
 * and refused, reports accepted and refused, and the true values of the accepted reports.
 */

import { Client, CollectorError, CryptoSource, type RandomSource, type ReportJson, postReports, uniform } from "../src/index.js";

interface Tally {
  /** requests the collector answered */
  requests: number;
  requestsAccepted: number;
  requestsRefused: number;
  reportsAccepted: number;
  reportsRefused: number;
  /** per value: accepted reports that encoded it */
  truth: number[];
  /** one line per refused or failed request */
  errors: string[];
  busy: boolean;
}

interface DemoState {
  ready: boolean;
  taskId: string | null;
  labels: string[];
  tally: Tally;
}

const REPORTS_URL = "/v1/reports";
const TASK_URL = "/v1/task";
const MAX_SIMULATED = 1_000_000;

const state: DemoState = {
  ready: false,
  taskId: null,
  labels: [],
  tally: {
    requests: 0,
    requestsAccepted: 0,
    requestsRefused: 0,
    reportsAccepted: 0,
    reportsRefused: 0,
    truth: [],
    errors: [],
    busy: false,
  },
};
(globalThis as unknown as { ldpDemo: DemoState }).ldpDemo = state;

function byId<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`the page has no #${id}`);
  return el as T;
}

function setStatus(text: string, kind: "loading" | "ready" | "sending" | "error"): void {
  const el = byId("status");
  el.textContent = text;
  el.dataset.state = kind;
}

function render(): void {
  const t = state.tally;
  byId("totals").textContent =
    `${t.requests} request(s) answered: ${t.requestsAccepted} accepted, ${t.requestsRefused} refused; ` +
    `${t.reportsAccepted} report(s) accepted, ${t.reportsRefused} refused.`;
  const body = byId<HTMLTableElement>("truth").tBodies[0];
  body.replaceChildren(
    ...state.labels.map((label, i) => {
      const row = document.createElement("tr");
      for (const text of [label, String(t.truth[i] ?? 0)]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        row.append(cell);
      }
      return row;
    }),
  );
  const idle = state.ready && !t.busy;
  for (const id of ["send", "simulate"]) byId<HTMLButtonElement>(id).disabled = !idle;
  byId<HTMLSelectElement>("value").disabled = !state.ready;
}

/** Posts one batch of reports (idempotency key, retries: postReports); returns whether it was accepted. */
async function post(reports: ReportJson[], values: number[]): Promise<boolean> {
  const t = state.tally;
  try {
    const answer = await postReports(REPORTS_URL, reports, { retries: 3 });
    t.requests++;
    if (answer.accepted === reports.length) {
      t.requestsAccepted++;
      t.reportsAccepted += reports.length;
      for (const v of values) t.truth[v] = (t.truth[v] ?? 0) + 1;
      return true;
    }
    t.errors.push(`200 with ${answer.accepted} of ${reports.length} reports accepted`);
  } catch (err) {
    if (!(err instanceof CollectorError) || err.status === 0) {
      t.errors.push(`request failed: ${String(err)}`);
      return false;
    }
    t.requests++;
    t.errors.push(`${err.status} ${err.error}: ${err.detail}`);
  }
  t.requestsRefused++;
  t.reportsRefused += reports.length;
  return false;
}

/** A value of the simulated population: `i` with weight `floor(2**20 / (i + 1))`, drawn exactly. */
function simulatedValue(src: RandomSource, weights: number[], total: number): number {
  let x = uniform(src, total);
  for (let i = 0; i < weights.length; i++) {
    if (x < weights[i]) return i;
    x -= weights[i];
  }
  return weights.length - 1;
}

function wholeNumber(id: string, low: number, high: number): number | null {
  const n = Number(byId<HTMLInputElement>(id).value);
  return Number.isInteger(n) && n >= low && n <= high ? n : null;
}

async function start(): Promise<void> {
  const response = await fetch(TASK_URL);
  if (!response.ok) throw new Error(`GET ${TASK_URL}: ${response.status}`);
  const task = (await response.json()) as Record<string, unknown>;
  const client = Client.fromTask(task);
  const d = client.params.d;
  const labels = Array.isArray(task.labels) ? (task.labels as unknown[]).map(String) : [];
  state.labels = Array.from({ length: d }, (_, i) => labels[i] ?? `value ${i}`);
  state.taskId = client.taskId;
  state.tally.truth = new Array<number>(d).fill(0);
  byId("task").textContent =
    `Task ${client.taskId}: ${client.params.mechanism.toUpperCase()} at epsilon ${String(task.epsilon)} ` +
    `over ${d} values.`;
  const select = byId<HTMLSelectElement>("value");
  select.replaceChildren(
    ...state.labels.map((label, i) => {
      const option = document.createElement("option");
      option.value = String(i);
      option.textContent = label;
      return option;
    }),
  );
  const random = new CryptoSource(65536); // crypto.getRandomValues, in blocks
  const weights = Array.from({ length: d }, (_, i) => Math.floor(2 ** 20 / (i + 1)));
  const total = weights.reduce((a, b) => a + b, 0);

  byId("send").addEventListener("click", async () => {
    const value = Number(select.value);
    state.tally.busy = true;
    render();
    const report = client.encode(value);
    byId("last").textContent = JSON.stringify(report);
    setStatus("sending your report", "sending");
    const ok = await post([report], [value]);
    state.tally.busy = false;
    setStatus(ok ? "your report was accepted" : `refused: ${state.tally.errors.at(-1)}`, ok ? "ready" : "error");
    render();
  });

  byId("simulate").addEventListener("click", async () => {
    const n = wholeNumber("n", 1, MAX_SIMULATED);
    const batch = wholeNumber("batch", 1, 100);
    if (n === null || batch === null) {
      setStatus(`N must be a whole number in [1, ${MAX_SIMULATED}], reports per request in [1, 1000]`, "error");
      return;
    }
    state.tally.busy = true;
    render();
    let sent = 0;
    let ok = true;
    while (sent < n && ok) {
      const size = Math.min(batch, n - sent);
      const values = Array.from({ length: size }, () => simulatedValue(random, weights, total));
      const reports = values.map((v) => client.encode(v));
      ok = await post(reports, values);
      sent += size;
      setStatus(`simulated clients: ${sent} of ${n} sent`, "sending");
      render();
    }
    state.tally.busy = false;
    setStatus(
      ok ? `${n} simulated clients sent` : `stopped after ${sent} of ${n}: ${state.tally.errors.at(-1)}`,
      ok ? "ready" : "error",
    );
    render();
  });

  state.ready = true;
  setStatus("ready", "ready");
  render();
}

start().catch((err: unknown) => {
  setStatus(`the demo could not start: ${String(err)}`, "error");
});
