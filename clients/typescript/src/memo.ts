/**
 * The memoized mechanisms of repeated collection (docs/wire_format.md, section 6; ldp/longitudinal/memo.py):
 * memo-grr, rappor, memo-olh, loloha. A permanent response per (user, task, memoization key), derived from
 * HMAC-SHA256 of the user's secret (so it is recomputed, never stored), then a fresh instantaneous
 * randomization per report from the random source. The same secret and bytes give the same report as
 * wire.vectors.memo_report_bytes.
 */

import { type ReportJson, reportJson } from "./client.js";
import { gf2Hash } from "./hash.js";
import { type Payload, MAX_EPSILON, MAX_DOMAIN, MIN_SAMPLED_PROBABILITY } from "./oracles.js";
import { CryptoSource, type RandomSource, bernoulli, bitLength, threshold, uniform } from "./random.js";
import { hmacSha256 } from "./sha256.js";
import { applyWire } from "./wire.js";

export const MEMO_MECHANISMS = ["memo-grr", "rappor", "memo-olh", "loloha"] as const;
export type MemoMechanism = (typeof MEMO_MECHANISMS)[number];
/** Domain-separation prefix of every HMAC message (ldp.longitudinal.memo.PRF_DOMAIN). */
export const PRF_DOMAIN = "ldp-longitudinal/v1";
/** Default `epsilon_1 / epsilon` (ldp.longitudinal.memo.DEFAULT_ALPHA). */
export const DEFAULT_ALPHA = 0.5;
/** Bytes of a new user secret. */
export const SECRET_BYTES = 32;
/** The storage key under which {@link loadOrCreateSecret} keeps the secret (hex). */
export const SECRET_STORAGE_KEY = "ldp-beam/secret/v1";

export interface MemoSpec {
  mechanism: MemoMechanism;
  /** epsilon_inf, the permanent stage's budget */
  epsilon: number;
  domainSize: number;
  /** one report's loss, in (0, epsilon]; default DEFAULT_ALPHA * epsilon */
  epsilon1?: number;
  /** memo-olh, loloha buckets (a power of two; default: the variance-optimal one) */
  g?: number;
  /** rappor: "sue" (default) or "oue" */
  permanent?: string;
}

/** The integers of the memoized wire procedure (the `params` of the memo vectors). */
export interface MemoParams {
  mechanism: MemoMechanism;
  d: number;
  p: number;
  q: number;
  perm_p: number;
  perm_q: number;
  inst_p: number;
  T_perm_p: number;
  /** rappor: the permanent threshold of a bit other than the value's */
  T_perm_q?: number;
  /** the instantaneous threshold; null: no instantaneous stage (epsilon_1 = epsilon) */
  T_inst: number | null;
  g?: number;
  family?: string;
  m?: number;
  k?: number;
}

function grrPq(eps: number, size: number): [number, number] {
  if (eps === Infinity) return [1, 0];
  const e = Math.exp(eps);
  return [e / (e + size - 1), 1 / (e + size - 1)];
}

function grrInstEps(epsPerm: number, eps1: number, size: number): number {
  if (eps1 >= epsPerm) return Infinity;
  const [p1, q1] = grrPq(epsPerm, size);
  const e1 = Math.exp(eps1);
  return Math.log((e1 * (1 - q1) - (1 - p1)) / (p1 - e1 * q1));
}

function uePerm(eps: number, kind: string): [number, number] {
  if (kind === "sue") {
    const e = Math.exp(eps / 2);
    return [e / (e + 1), 1 / (e + 1)];
  }
  if (kind === "oue") return [0.5, 1 / (Math.exp(eps) + 1)];
  throw new Error(`permanent must be 'sue' or 'oue', got ${JSON.stringify(kind)}`);
}

function ueEps(p: number, q: number): number {
  return Math.log((p * (1 - q)) / ((1 - p) * q));
}

function ueCompose(p1: number, q1: number, s: number): [number, number] {
  return [p1 * s + (1 - p1) * (1 - s), q1 * s + (1 - q1) * (1 - s)];
}

/** The symmetric instantaneous keep probability giving one-report loss eps1 (bisection, as memo.py). */
function ueInstantaneous(p1: number, q1: number, eps1: number): number {
  if (eps1 >= ueEps(p1, q1) * (1 - 1e-15)) return 1;
  let lo = 0.5;
  let hi = 1;
  for (let i = 0; i < 200; i++) {
    const mid = 0.5 * (lo + hi);
    const [p, q] = ueCompose(p1, q1, mid);
    if (ueEps(p, q) < eps1) lo = mid;
    else hi = mid;
    if (hi - lo < 1e-17) break;
  }
  return 0.5 * (lo + hi);
}

function lhVarianceFactor(epsPerm: number, eps1: number, g: number): number {
  const [p1] = grrPq(epsPerm, g);
  const [p2, q2] = grrPq(grrInstEps(epsPerm, eps1, g), g);
  const p = p1 * p2 + (1 - p1) * q2;
  const q = 1 / g;
  return (q * (1 - q)) / (p - q) ** 2;
}

/** Default g of memo-olh / loloha (ldp.longitudinal.memo.lh_buckets). */
export function lhBuckets(eps: number, eps1: number, d: number): number {
  const kmax = Math.max(1, bitLength(d) - 1);
  let best = 2;
  let bestF = Infinity;
  for (let k = 1; k <= Math.min(kmax, 40); k++) {
    const f = lhVarianceFactor(eps, eps1, 2 ** k);
    if (f < bestF) [best, bestF] = [2 ** k, f];
  }
  return best;
}

function isMemo(x: string): x is MemoMechanism {
  return (MEMO_MECHANISMS as readonly string[]).includes(x);
}

/** The wire parameters of a memoized mechanism, computed as ldp/longitudinal/memo.py does. */
export function memoWireParams(spec: MemoSpec): MemoParams {
  const { mechanism, epsilon: eps } = spec;
  const d = spec.domainSize;
  if (!isMemo(mechanism)) throw new Error(`unknown memoized mechanism ${JSON.stringify(mechanism)}`);
  if (typeof eps !== "number" || !Number.isFinite(eps) || eps <= 0 || eps > MAX_EPSILON) {
    throw new Error(`epsilon must be a number in (0, ${MAX_EPSILON}], got ${eps}`);
  }
  if (!Number.isInteger(d) || d < 2 || d > MAX_DOMAIN) throw new Error(`domain_size must be an integer in [2, ${MAX_DOMAIN}]`);
  const eps1 = spec.epsilon1 ?? DEFAULT_ALPHA * eps;
  if (typeof eps1 !== "number" || !Number.isFinite(eps1) || !(eps1 > 0 && eps1 <= eps)) {
    throw new Error(`epsilon_1 (one report) must be in (0, epsilon] = (0, ${eps}], got ${eps1}`);
  }
  const out: Partial<MemoParams> = { mechanism, d };
  let sampled: number[];
  let gap: number;
  if (mechanism === "rappor") {
    const [p1, q1] = uePerm(eps, spec.permanent ?? "sue");
    const s = ueInstantaneous(p1, q1, eps1);
    const [p, q] = ueCompose(p1, q1, s);
    Object.assign(out, { p, q, perm_p: p1, perm_q: q1, inst_p: s });
    gap = (p1 - q1) * (2 * s - 1);
    sampled = [p1, q1, s];
  } else {
    let size = d;
    if (mechanism !== "memo-grr") {
      const g = spec.g ?? lhBuckets(eps, eps1, d);
      const k = bitLength(g) - 1;
      if (!Number.isInteger(g) || g < 2 || 2 ** k !== g) throw new Error(`g = ${g} is not a power of two >= 2`);
      Object.assign(out, { g, family: "gf2-affine", m: Math.max(1, bitLength(d - 1)), k });
      size = g;
    }
    const [p1, q1] = grrPq(eps, size);
    const eps2 = grrInstEps(eps, eps1, size);
    const [p2, q2] = grrPq(eps2, size);
    const p = p1 * p2 + (1 - p1) * q2;
    const g2 = eps2 === Infinity ? 1 : Math.expm1(eps2) / (Math.exp(eps2) + size - 1);
    const g1 = Math.expm1(eps) / (Math.exp(eps) + size - 1);
    if (mechanism === "memo-grr") {
      Object.assign(out, { p, q: q1 * p2 + (1 - q1) * q2 });
      gap = g1 * g2;
    } else {
      Object.assign(out, { p, q: 1 / size });
      gap = ((size - 1) * g1 * (size - 1) * g2) / (size * (size - 1));
    }
    Object.assign(out, { perm_p: p1, perm_q: q1, inst_p: p2 });
    sampled = [p1, p2];
  }
  const inner = sampled.filter((x) => x > 0 && x < 1).map((x) => Math.min(x, 1 - x));
  if (inner.length && Math.min(...inner) < MIN_SAMPLED_PROBABILITY) {
    throw new Error(`epsilon = ${eps} is too large for ${mechanism} on d = ${d}: a sampled probability is below 2**-32`);
  }
  if (gap < MIN_SAMPLED_PROBABILITY) throw new Error(`${mechanism}: p* - q* is below 2**-32; use a larger epsilon`);
  out.T_perm_p = threshold(out.perm_p!);
  if (mechanism === "rappor") out.T_perm_q = threshold(out.perm_q!);
  out.T_inst = out.inst_p! >= 1 ? null : threshold(out.inst_p!);
  return out as MemoParams;
}

const encoder = new TextEncoder();

/** The HMAC message: PRF_DOMAIN 0 label 0 len(task)_u16be task 0 key_u64be block_u32be. */
export function prfMessage(label: string, taskId: string, key: bigint, block: number): Uint8Array {
  const dom = encoder.encode(PRF_DOMAIN);
  const lab = encoder.encode(label);
  const t = encoder.encode(taskId);
  if (t.length > 0xffff) throw new Error("task_id longer than 65535 bytes");
  const out = new Uint8Array(dom.length + 1 + lab.length + 1 + 2 + t.length + 1 + 12);
  const view = new DataView(out.buffer);
  let o = 0;
  out.set(dom, o);
  o += dom.length + 1;
  out.set(lab, o);
  o += lab.length + 1;
  view.setUint16(o, t.length);
  out.set(t, o + 2);
  o += 2 + t.length + 1;
  view.setBigUint64(o, BigInt.asUintN(64, key));
  view.setUint32(o + 8, block);
  return out;
}

/** `count` 64-bit words: HMAC-SHA256 blocks of (secret, label, task, key), each read as 4 big-endian words. */
export function prfWords(secret: Uint8Array, taskId: string, label: string, key: bigint, count: number): bigint[] {
  if (secret.length < 16) throw new Error("secret must be at least 16 bytes");
  if (key < 0n || key >= 1n << 64n) throw new Error(`memoization key must be in [0, 2**64), got ${key}`);
  const words: bigint[] = [];
  for (let b = 0; words.length < count; b++) {
    const view = new DataView(hmacSha256(secret, prfMessage(label, taskId, key, b)).buffer);
    for (let i = 0; i < 4 && words.length < count; i++) words.push(view.getBigUint64(8 * i));
  }
  return words;
}

function top53(w: bigint): number {
  return Number(w >> 11n);
}

/** A user's permanent state for one value: its memoization key, memo and (local hashing) seed and bucket. */
export interface Permanent {
  memoKey: number;
  /** the permanent response: a value of [d] / [g], or rappor's d bits (0/1) */
  memo: number | number[];
  seed?: bigint;
  hash?: number;
}

/** The permanent response of `value` (a function of the secret; docs/wire_format.md, section 6). */
export function permanentResponse(params: MemoParams, secret: Uint8Array, taskId: string, value: number): Permanent {
  const d = params.d;
  if (!Number.isInteger(value) || value < 0 || value >= d) throw new Error(`value must be an integer in [0, ${d})`);
  if (params.mechanism === "rappor") {
    const words = prfWords(secret, taskId, "memo", BigInt(value), d);
    const memo = words.map((w, j) => (top53(w) < (j === value ? params.T_perm_p : params.T_perm_q!) ? 1 : 0));
    return { memoKey: value, memo };
  }
  let size = d;
  let start = value;
  let key = value;
  let seed: bigint | undefined;
  if (params.mechanism !== "memo-grr") {
    seed = prfWords(secret, taskId, "seed", 0n, 1)[0];
    size = params.g!;
    start = gf2Hash(seed, value, params.m!, params.k!);
    key = params.mechanism === "loloha" ? start : value;
  }
  const [w0, w1] = prfWords(secret, taskId, "memo", BigInt(key), 2);
  let memo = start;
  if (top53(w0) >= params.T_perm_p) {
    const o = Number(w1 % BigInt(size - 1));
    memo = o + (o >= start ? 1 : 0);
  }
  return seed === undefined ? { memoKey: key, memo } : { memoKey: key, memo, seed, hash: start };
}

/** The instantaneous step on a memo: GRR on [d] / [g], or rappor's per-bit keep-or-flip, packed bits. */
export function instantaneous(params: MemoParams, memo: number | number[], src: RandomSource): number | Uint8Array {
  const t = params.T_inst;
  if (params.mechanism === "rappor") {
    const bitsIn = memo as number[];
    if (bitsIn.length !== params.d) throw new Error(`a rappor memo has ${params.d} bits`);
    const out = new Uint8Array((params.d + 7) >> 3);
    for (let i = 0; i < params.d; i++) {
      const keep = t === null || bernoulli(src, t);
      if ((bitsIn[i] === 1) === keep) out[i >> 3] |= 1 << (i & 7);
    }
    return out;
  }
  const size = params.mechanism === "memo-grr" ? params.d : params.g!;
  const m = memo as number;
  if (!Number.isInteger(m) || m < 0 || m >= size) throw new Error(`a memo must be an integer in [0, ${size})`);
  if (t === null || bernoulli(src, t)) return m;
  const o = uniform(src, size - 1);
  return o + (o >= m ? 1 : 0);
}

/** One report's payload: the permanent response from the secret, then the instantaneous step. */
export function memoPayload(params: MemoParams, secret: Uint8Array, taskId: string, value: number, src: RandomSource): Payload {
  const perm = permanentResponse(params, secret, taskId, value);
  const y = instantaneous(params, perm.memo, src);
  if (y instanceof Uint8Array) return { bits: y };
  return perm.seed === undefined ? { value: y } : { seed: perm.seed, value: y };
}

/** Where the client keeps the user's secret: `localStorage` in a browser, any key-value store elsewhere. */
export interface SecretStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

function toHex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** Bytes of a hex string (two digits a byte). */
export function fromHex(hex: string): Uint8Array {
  if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) throw new Error("not an even-length hex string");
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** A fresh 32-byte secret from WebCrypto. */
export function newSecret(): Uint8Array {
  const c = (globalThis as { crypto?: { getRandomValues<T extends ArrayBufferView>(a: T): T } }).crypto;
  if (c === undefined) throw new Error("no WebCrypto: globalThis.crypto.getRandomValues is required");
  return c.getRandomValues(new Uint8Array(SECRET_BYTES));
}

/**
 * The user's secret from `storage` (hex under {@link SECRET_STORAGE_KEY}), drawing and storing a new one on
 * first use. A stored value that is not 32 bytes of hex is an error, never silently replaced: a new secret
 * means new permanent responses, which spend the budget again.
 */
export function loadOrCreateSecret(storage: SecretStorage): Uint8Array {
  const stored = storage.getItem(SECRET_STORAGE_KEY);
  if (stored !== null) {
    const s = fromHex(stored);
    if (s.length !== SECRET_BYTES) throw new Error(`stored secret must be ${SECRET_BYTES} bytes of hex`);
    return s;
  }
  const s = newSecret();
  storage.setItem(SECRET_STORAGE_KEY, toHex(s));
  return s;
}

type Json = Record<string, unknown>;

/** The memoized oracle a task file asks for (`mechanism`, `epsilon`, `domain_size`, `params`). */
export function memoSpecFromTask(task: unknown): MemoSpec {
  if (typeof task !== "object" || task === null || Array.isArray(task)) throw new Error("task must be a JSON object");
  const t = task as Json;
  if (typeof t.mechanism !== "string" || !isMemo(t.mechanism)) {
    throw new Error(`mechanism ${JSON.stringify(t.mechanism)} is not memoized (${MEMO_MECHANISMS.join(" ")})`);
  }
  const params = (t.params ?? {}) as Json;
  const extra = Object.keys(params).filter((k) => !["epsilon_1", "g", "permanent"].includes(k));
  if (extra.length) throw new Error(`unknown params for ${t.mechanism}: ${extra.join(", ")}`);
  return {
    mechanism: t.mechanism,
    epsilon: t.epsilon as number,
    domainSize: (t.domain_size as number) + (t.hide_participation === true ? 1 : 0),
    epsilon1: params.epsilon_1 as number | undefined,
    g: params.g as number | undefined,
    permanent: params.permanent as string | undefined,
  };
}

export interface MemoEncodeOptions {
  /** instantaneous random words (default: WebCrypto) */
  random?: RandomSource;
  eventTime?: number;
  group?: number;
  clientId?: Uint8Array;
}

/** Encodes the values of one memoized task for one user (its secret). */
export class MemoClient {
  readonly taskId: string;
  readonly params: MemoParams;
  private readonly secret: Uint8Array;
  private crypto: CryptoSource | undefined;

  /** `wire`: the task's client parameters ({@link applyWire}), whose thresholds the client then uses. */
  constructor(taskId: string, spec: MemoSpec, secret: Uint8Array, wire?: unknown) {
    if (typeof taskId !== "string" || taskId.length === 0) throw new Error("task_id must be a non-empty string");
    if (secret.length < 16) throw new Error("secret must be at least 16 bytes");
    this.taskId = taskId;
    this.params = applyWire(memoWireParams(spec), wire, taskId);
    this.secret = Uint8Array.from(secret);
  }

  /**
   * The client of a task file, with the secret given or kept in `storage` ({@link loadOrCreateSecret});
   * `wire`: the task's client parameters.
   */
  static fromTask(task: unknown, secret: Uint8Array | SecretStorage, options: { wire?: unknown } = {}): MemoClient {
    const s = secret instanceof Uint8Array ? secret : loadOrCreateSecret(secret);
    return new MemoClient((task as Json).task_id as string, memoSpecFromTask(task), s, options.wire);
  }

  /** The permanent state of `value` (for ledgers and tests). */
  permanent(value: number): Permanent {
    return permanentResponse(this.params, this.secret, this.taskId, value);
  }

  payload(value: number, random?: RandomSource): Payload {
    const src = random ?? (this.crypto ??= new CryptoSource());
    return memoPayload(this.params, this.secret, this.taskId, value, src);
  }

  /** One report of `value` in the JSON form. */
  encode(value: number, options: MemoEncodeOptions = {}): ReportJson {
    const payload = this.payload(value, options.random);
    return reportJson(this.taskId, payload, options.eventTime ?? Date.now(), options.group ?? 0, options.clientId);
  }
}
