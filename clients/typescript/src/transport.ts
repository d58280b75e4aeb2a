/**
 * Posting reports to the HTTP collector (POST /v1/reports, docs/collector.md): one request per batch, an
 * Idempotency-Key per request that every retry repeats (so a retry after a lost answer is not counted twice),
 * retries with exponential backoff and full jitter, or the collector's Retry-After, on no answer, 429 and
 * 5xx. Any other refusal (4xx) is final and thrown as a CollectorError.
 */

import type { ReportJson } from "./client.js";
import { webCrypto } from "./random.js";

/** The collector's 200 answer. */
export interface PostAnswer {
  accepted: number;
  /** true when the collector had already stored this request (a retry) and wrote nothing again */
  duplicate?: boolean;
}

export interface PostOptions {
  /** the request's idempotency key (default: 16 random bytes from WebCrypto, as hex) */
  idempotencyKey?: string;
  /** the collector's client token, sent as `Authorization: Bearer <token>` */
  token?: string;
  /** retries after the first attempt (default 6) */
  retries?: number;
  /** first backoff in milliseconds, doubled each retry up to `maxDelayMs` (defaults 200 and 10,000) */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** the fetch to use (default: globalThis.fetch); tests pass a fake */
  fetch?: (url: string, init: { method: string; headers: Record<string, string>; body: string }) => Promise<{
    status: number;
    headers: { get(name: string): string | null };
    text(): Promise<string>;
  }>;
  /** how to wait (default: setTimeout); tests pass a recorder */
  sleep?: (ms: number) => Promise<void>;
}

/** A refusal the collector will repeat (4xx other than 429), or retries that ran out (`status` 0: no answer). */
export class CollectorError extends Error {
  readonly status: number;
  readonly error: string;
  readonly detail: string;

  constructor(status: number, error: string, detail: string) {
    super(`collector answered ${status}: ${error}: ${detail}`);
    this.status = status;
    this.error = error;
    this.detail = detail;
  }
}

/** 128 random bits from WebCrypto, as 32 hex digits. */
export function newIdempotencyKey(): string {
  const bytes = new Uint8Array(16);
  webCrypto().getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function jitter(): number {
  const w = new Uint32Array(1);
  webCrypto().getRandomValues(w);
  return w[0] / 2 ** 32;
}

/**
 * Posts `reports` (at most the collector's --max_batch, 100 by default) as one JSON request to `url`
 * (`https://collector.example/v1/reports`) and resolves with the collector's answer once it acknowledged
 * them (a 200 means they are durable). Retries keep the same idempotency key.
 */
export async function postReports(url: string, reports: ReportJson[], options: PostOptions = {}): Promise<PostAnswer> {
  const doFetch = options.fetch ?? (globalThis.fetch as unknown as NonNullable<PostOptions["fetch"]>);
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const retries = options.retries ?? 6;
  const base = options.baseDelayMs ?? 200;
  const cap = options.maxDelayMs ?? 10_000;
  const headers: Record<string, string> = {
    "Content-Type": "application/json",
    "Idempotency-Key": options.idempotencyKey ?? newIdempotencyKey(),
  };
  if (options.token !== undefined) headers.Authorization = `Bearer ${options.token}`;
  const body = JSON.stringify({ reports });
  let last = new CollectorError(0, "no_answer", "no answer");
  for (let attempt = 0; attempt <= retries; attempt++) {
    let wait: number | undefined;
    try {
      const response = await doFetch(url, { method: "POST", headers, body });
      const text = await response.text();
      let answer: Record<string, unknown> = {};
      try {
        answer = JSON.parse(text) as Record<string, unknown>;
      } catch {
        answer = { error: "bad_answer", detail: text.slice(0, 200) };
      }
      if (response.status === 200) return answer as unknown as PostAnswer;
      last = new CollectorError(response.status, String(answer.error ?? "?"), String(answer.detail ?? ""));
      if (response.status !== 429 && response.status < 500) throw last;
      const after = response.headers.get("Retry-After");
      if (after !== null && /^[0-9]+$/.test(after)) wait = Number(after) * 1000;
    } catch (err) {
      if (err instanceof CollectorError && err.status !== 0 && err.status !== 429 && err.status < 500) throw err;
      if (!(err instanceof CollectorError)) last = new CollectorError(0, "no_answer", String(err));
    }
    if (attempt === retries) break;
    await sleep(wait ?? Math.min(cap, base * 2 ** attempt) * (0.5 + 0.5 * jitter()));
  }
  throw last;
}
