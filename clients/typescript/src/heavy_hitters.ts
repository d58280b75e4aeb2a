/**
 * Heavy-hitters reports (PEM, docs/wire_format.md section 10): one string of at most `max_length` bytes per
 * report, sent as its level (`group`), a public seed and `y` in `[0, g)`. The level layout and thresholds
 * come from the task's client parameters (`python -m wire.client TASK.json`, or the collector's
 * `GET /v1/client_params`); the client never recomputes them.
 *
 * A `"mode": "trie"` task's clients report at the level the previous window published (the collector's
 * `GET /v1/publication`, read with `publishedLevel`; level 0 before the first publication): step 1 of the
 * procedure (drawing the level) is skipped and no random word is spent on it.
 */

import { type ReportJson, SCHEMA_VERSION, reportJson, timePrecisionMs } from "./client.js";
import { seedWord } from "./hash.js";
import { CryptoSource, type RandomSource, bernoulli, bitLength, cryptoSeed, uniform, uniform53 } from "./random.js";

export const HH_MECHANISMS = ["pem"] as const;
export type HHMechanism = (typeof HH_MECHANISMS)[number];

/** Largest `max_length` a task may declare (ldp.heavy_hitters.strings). */
export const MAX_LENGTH_LIMIT = 1024;
const MASK64 = (1n << 64n) - 1n;
const TWO53 = 2 ** 53;
/** Seed-word offsets of the row choice and of the GF(2) matrix (ldp.heavy_hitters.sketch). */
const ROW_WORD = 64;
const MATRIX_WORD = 65;

/** One level of the client parameters. */
export interface PemLevel {
  level: number;
  hash: "direct" | "hashed" | "full";
  bits: number;
  d: number;
  rows: number;
  t: number;
  g: number;
  key_seed: string | null;
  p: number;
  T_p: number;
}

/** The client parameters of a heavy-hitters task (`wire.vectors.pem_wire_params`). */
export interface PemParams {
  mechanism: HHMechanism;
  epsilon: number;
  max_length: number;
  total_bits: number;
  weights: number[];
  T_level: number[];
  levels: PemLevel[];
}

type Json = Record<string, unknown>;

function obj(x: unknown, what: string): Json {
  if (typeof x !== "object" || x === null || Array.isArray(x)) throw new Error(`${what} must be a JSON object`);
  return x as Json;
}

function int(x: unknown, what: string, lo: number, hi: number): number {
  if (typeof x !== "number" || !Number.isInteger(x) || x < lo || x > hi) {
    throw new Error(`${what} must be an integer in [${lo}, ${hi}], got ${JSON.stringify(x)}`);
  }
  return x;
}

/** `L = 8 B + bitLength(B)`: the bits of a value with its length trailer. */
export function totalBits(maxLength: number): number {
  return 8 * maxLength + bitLength(maxLength);
}

function checkLevel(x: unknown, j: number, width: number): PemLevel {
  const lv = obj(x, `level ${j}`);
  const hash = lv.hash;
  if (hash !== "direct" && hash !== "hashed" && hash !== "full") throw new Error(`level ${j}: unknown hash ${JSON.stringify(hash)}`);
  int(lv.level, `level ${j}: level`, j, j);
  const bits = int(lv.bits, `level ${j}: bits`, 1, width);
  const t = int(lv.t, `level ${j}: t`, 1, 16);
  int(lv.g, `level ${j}: g`, 2 ** t, 2 ** t);
  int(lv.T_p, `level ${j}: T_p`, 1, TWO53);
  const d = hash === "full" ? int(lv.d, `level ${j}: d`, width, width) : int(lv.d, `level ${j}: d`, 1, 32);
  const rows = int(lv.rows, `level ${j}: rows`, 1, hash === "hashed" ? 64 : 1);
  if (hash === "direct" && bits > d) throw new Error(`level ${j}: a direct level has at most d bits`);
  if (hash === "full" && bits !== width) throw new Error(`level ${j}: the full level has all ${width} bits`);
  if (hash === "hashed" && (typeof lv.key_seed !== "string" || !/^(0|[1-9][0-9]*)$/.test(lv.key_seed) || BigInt(lv.key_seed) > MASK64)) {
    throw new Error(`level ${j}: key_seed must be the decimal string of an unsigned 64-bit integer`);
  }
  return { ...(lv as unknown as PemLevel), rows };
}

/**
 * The client parameters of a heavy-hitters task, checked against the task file: a client parameters
 * document (`{task_id, vectors_version, params}`) or its `params` object. Refuses a file of another task
 * (another `task_id`, `max_length` or `epsilon`) or of an unknown shape.
 */
export function pemParams(task: unknown, wire: unknown): PemParams {
  const t = obj(task, "task");
  if (wire === undefined || wire === null) {
    throw new Error("a heavy-hitters client needs the task's client parameters (python -m wire.client TASK.json)");
  }
  const doc = obj(wire, "client parameters");
  const p = doc.params === undefined ? doc : obj(doc.params, "client parameters' params");
  if (doc.task_id !== undefined && doc.task_id !== t.task_id) {
    throw new Error(`client parameters for task ${JSON.stringify(doc.task_id)}, not ${JSON.stringify(t.task_id)}`);
  }
  if (p.mechanism !== "pem") throw new Error(`client parameters of mechanism ${JSON.stringify(p.mechanism)}, not pem`);
  const b = int(p.max_length, "max_length", 1, MAX_LENGTH_LIMIT);
  if (b !== t.max_length) throw new Error(`client parameters for max_length ${b}, the task has ${String(t.max_length)}`);
  if (p.epsilon !== t.epsilon) throw new Error(`client parameters for epsilon ${String(p.epsilon)}, the task has ${String(t.epsilon)}`);
  const width = int(p.total_bits, "total_bits", totalBits(b), totalBits(b));
  if (!Array.isArray(p.levels) || p.levels.length < 2 || p.levels.length > 256) throw new Error("levels must list 2 to 256 levels");
  const levels = p.levels.map((x, j) => checkLevel(x, j, width));
  if (levels[levels.length - 1].hash !== "full") throw new Error("the last level is the full (verification) level");
  const tl = p.T_level;
  if (!Array.isArray(tl) || tl.length !== levels.length - 1) throw new Error(`T_level must hold ${levels.length - 1} thresholds`);
  tl.forEach((x, i) => int(x, `T_level[${i}]`, i === 0 ? 0 : (tl[i - 1] as number), TWO53));
  return p as unknown as PemParams;
}

const UTF8 = new TextEncoder();

/** The bytes of a value: a string as UTF-8 (refusing lone surrogates, which have no UTF-8 form). */
export function valueBytes(value: string | Uint8Array): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (typeof value !== "string") throw new Error("a heavy-hitters value is a string or a Uint8Array");
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < value.length) {
      const n = value.charCodeAt(i + 1);
      if (n >= 0xdc00 && n <= 0xdfff) {
        i++;
        continue;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) throw new Error(`the value has a lone surrogate at ${i}: not UTF-8`);
  }
  return UTF8.encode(value);
}

/**
 * `x`, the `L`-bit string of a value: its bytes zero-padded to `B`, then its length in `bitLength(B)` bits.
 * A value of more than `B` bytes is refused, or with `truncate` cut to `B` bytes (a string at a UTF-8
 * character boundary), as the task's `truncate` says.
 */
export function valueBits(value: string | Uint8Array, maxLength: number, truncate = false): bigint {
  let data = valueBytes(value);
  if (data.length > maxLength) {
    if (!truncate) throw new Error(`a value of ${data.length} bytes, more than max_length ${maxLength}`);
    let cut = maxLength;
    if (typeof value === "string") while (cut > 0 && (data[cut] & 0xc0) === 0x80) cut--;
    data = data.subarray(0, cut);
  }
  let x = 0n;
  for (let i = 0; i < maxLength; i++) x = (x << 8n) | BigInt(i < data.length ? data[i] : 0);
  return (x << BigInt(bitLength(maxLength))) | BigInt(data.length);
}

function parity(x: bigint): number {
  let p = 0n;
  while (x > 0n) {
    p ^= x & 1n;
    x >>= 1n;
  }
  return Number(p);
}

function seedWords(seed: bigint, count: number, offset: number): bigint[] {
  const out: bigint[] = [];
  for (let k = 0; k < count; k++) out.push(seedWord(seed, offset + k));
  return out;
}

/** The bucket `b` of a direct or hashed level (section 10, step 3). */
function bucket(lv: PemLevel, seed: bigint, x: bigint, width: number): bigint {
  const prefix = x >> BigInt(width - lv.bits);
  if (lv.hash === "direct") return prefix;
  const pieces = Math.ceil(lv.bits / 32);
  const padded = prefix << BigInt(32 * pieces - lv.bits);
  const row = Number(seedWord(seed, ROW_WORD) % BigInt(lv.rows));
  const keys = seedWords(BigInt(lv.key_seed as string), pieces + 1, row * (pieces + 1));
  let acc = keys[pieces];
  for (let i = 0; i < pieces; i++) {
    const xi = (padded >> BigInt(32 * (pieces - 1 - i))) & 0xffffffffn;
    acc = (acc + keys[i] * xi) & MASK64;
  }
  return acc >> BigInt(64 - lv.d);
}

/** `H`, the report's hash of the value `x` into `[g]` at level `lv` (section 10, steps 3 and 4). */
export function pemHash(lv: PemLevel, seed: bigint, x: bigint, width: number): number {
  const s = seed & MASK64;
  const t = lv.t;
  let h = 0;
  if (lv.hash === "full") {
    const nw = Math.ceil(width / 64);
    const xs = x << BigInt(64 * nw - width);
    const v = seedWords(s, t * nw + 1, MATRIX_WORD);
    for (let i = 0; i < t; i++) {
      let row = 0n;
      for (let k = 0; k < nw; k++) row = (row << 64n) | v[i * nw + k];
      h |= parity(row & xs) << i;
    }
    return (h ^ Number(v[t * nw] & BigInt(2 ** t - 1))) >>> 0;
  }
  const b = bucket(lv, s, x, width);
  const v = seedWords(s, t + 1, MATRIX_WORD);
  const mask = (1n << BigInt(lv.d)) - 1n;
  for (let i = 0; i < t; i++) h |= parity(v[i] & mask & b) << i;
  return (h ^ Number(v[t] & BigInt(2 ** t - 1))) >>> 0;
}

/** One report's level, `H` and `y` (section 10, steps 1 to 5). */
export interface PemOutput {
  level: number;
  hash: number;
  value: number;
  seed: bigint;
}

function checkedLevel(params: PemParams, level: unknown): number {
  return int(level, "level", 0, params.levels.length - 1);
}

/**
 * Encodes one value from the random words and the public seed (the vectors' procedure); `fixedLevel` (a
 * trie-mode client: the published level) skips step 1, the level draw, and spends no word on it.
 */
export function encodePem(
  params: PemParams,
  value: string | Uint8Array,
  src: RandomSource,
  seed: bigint,
  truncate = false,
  fixedLevel?: number,
): PemOutput {
  const x = valueBits(value, params.max_length, truncate);
  let level = 0;
  if (fixedLevel === undefined) {
    const u = uniform53(src);
    for (const t of params.T_level) if (u >= t) level++;
  } else {
    level = checkedLevel(params, fixedLevel);
  }
  const lv = params.levels[level];
  const s = BigInt.asUintN(64, seed);
  const hash = pemHash(lv, s, x, params.total_bits);
  let y = hash;
  if (!bernoulli(src, lv.T_p)) {
    const o = uniform(src, lv.g - 1);
    y = o + (o >= hash ? 1 : 0);
  }
  return { level, hash, value: y, seed: s };
}

export interface PemEncodeOptions {
  /** random words (default: WebCrypto); conformance tests pass a ByteSource */
  random?: RandomSource;
  /** the public seed, unsigned 64-bit (default: 8 bytes of WebCrypto, never the report's random words) */
  seed?: bigint;
  /** milliseconds since the epoch (default: now) */
  eventTime?: number;
  /** pseudonymous client id, 1 to 64 bytes (tasks whose budget counts clients) */
  clientId?: Uint8Array;
  /** trie mode: the level to report at (`publishedLevel`; default 0); a one-window task refuses it */
  level?: number;
}

/**
 * The level a trie-mode client reports at: the `level` of the newest publication (the JSON of the
 * collector's `GET /v1/publication`, or of the job's `--trie_dir DIR/latest.json`), 0 for none (`null` or
 * `undefined`: nothing published yet). Refuses another task's publication or a level the task does not have.
 */
export function publishedLevel(publication: unknown, client: PemClient): number {
  if (publication === null || publication === undefined) return 0;
  const p = obj(publication, "publication");
  if (p.task_id !== client.taskId) {
    throw new Error(`a publication of task ${JSON.stringify(p.task_id)}, not ${JSON.stringify(client.taskId)}`);
  }
  return checkedLevel(client.params, p.level);
}

/** Encodes the strings of one heavy-hitters task. */
export class PemClient {
  readonly taskId: string;
  readonly params: PemParams;
  /** shuffled tasks: event times are rounded down to a multiple of this (ms); null: kept to the millisecond */
  readonly timePrecisionMs: number | null;
  /** the task's `truncate`: cut a long value to `max_length` bytes instead of refusing it */
  readonly truncate: boolean;
  /** the task's `mode`: `one_window` (a random level per report) or `trie` (the published level) */
  readonly mode: "one_window" | "trie";
  private crypto: CryptoSource | undefined;

  private constructor(taskId: string, params: PemParams, timePrecision: number | null, truncate: boolean,
                      mode: "one_window" | "trie") {
    this.taskId = taskId;
    this.params = params;
    this.timePrecisionMs = timePrecision;
    this.truncate = truncate;
    this.mode = mode;
  }

  /**
   * The client of a heavy-hitters task file; `wire`: its client parameters (required: the level layout).
   * Refuses another kind, a mechanism other than `pem` / `auto`, and the `olh` search (no byte procedure).
   */
  static fromTask(task: unknown, options: { wire?: unknown } = {}): PemClient {
    const t = obj(task, "task");
    if (typeof t.task_id !== "string" || t.task_id.length === 0) throw new Error("task_id must be a non-empty string");
    if (t.kind !== "heavy_hitters") throw new Error(`task kind ${JSON.stringify(t.kind)}: PemClient encodes heavy_hitters tasks`);
    const mech = t.mechanism ?? "auto";
    if (mech !== "pem" && mech !== "auto") throw new Error(`mechanism ${JSON.stringify(mech)}: this client knows ${HH_MECHANISMS.join(" ")}`);
    const sv = t.schema_version ?? SCHEMA_VERSION;
    if (sv !== SCHEMA_VERSION) throw new Error(`schema_version ${String(sv)}: this client writes version ${SCHEMA_VERSION}`);
    const params = t.params === undefined || t.params === null ? {} : obj(t.params, "params");
    if (params.search === "olh") throw new Error("the olh search has no byte procedure: use the default sketch search");
    if (t.truncate !== undefined && typeof t.truncate !== "boolean") throw new Error("truncate must be true or false");
    const mode = t.mode ?? "one_window";
    if (mode !== "one_window" && mode !== "trie") throw new Error(`mode ${JSON.stringify(mode)}: one_window or trie`);
    return new PemClient(t.task_id, pemParams(t, options.wire), timePrecisionMs(t), t.truncate === true, mode);
  }

  private cryptoSource(): CryptoSource {
    this.crypto ??= new CryptoSource();
    return this.crypto;
  }

  /**
   * The level, hash and output of one value (no envelope); `level`: a trie-mode task's published level
   * (default 0), refused for a one-window task.
   */
  output(value: string | Uint8Array, random: RandomSource = this.cryptoSource(), seed?: bigint, level?: number): PemOutput {
    if (this.mode === "one_window" && level !== undefined) {
      throw new Error(`task ${JSON.stringify(this.taskId)} is not in trie mode: its reports draw their level at random`);
    }
    const fixed = this.mode === "trie" ? (level ?? 0) : undefined;
    return encodePem(this.params, value, random, seed ?? cryptoSeed(), this.truncate, fixed);
  }

  /** One report of `value` (a string, UTF-8, or bytes) in the JSON form. */
  encode(value: string | Uint8Array, options: PemEncodeOptions = {}): ReportJson {
    const out = this.output(value, options.random ?? this.cryptoSource(), options.seed, options.level);
    let eventTime = options.eventTime ?? Date.now();
    if (this.timePrecisionMs !== null) eventTime -= eventTime % this.timePrecisionMs; // shuffled: no fine times
    return reportJson(this.taskId, { value: out.value, seed: out.seed }, eventTime, out.level, options.clientId);
  }
}
