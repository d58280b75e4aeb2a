/**
 * A task's client: reads the task file (or its resolved form), encodes one value per report in the JSON
 * form of docs/wire_format.md, section 1, with WebCrypto randomness unless told otherwise.
 */

import { toBase64 } from "./base64.js";
import { type Mechanism, MECHANISMS, type OracleSpec, type Payload, type WireParams, encodePayload, wireParams } from "./oracles.js";
import { CryptoSource, type RandomSource, cryptoSeed } from "./random.js";
import { applyWire } from "./wire.js";

/** The wire format version these reports follow (schemas/report.avsc). */
export const SCHEMA_VERSION = 2;
const MAX_EVENT_MS = 7258118400000; // 2200-01-01T00:00:00Z

/** A report in the JSON form: exactly the fields of schemas/report.avsc. */
export interface ReportJson {
  task_id: string;
  schema_version: number;
  event_time: number;
  group: number;
  value: number | null;
  seed: string | null;
  bits: string | null;
  items: number[] | null;
  reals: number[] | null;
  client_id: string | null;
}

export interface EncodeOptions {
  /** random words (default: WebCrypto); conformance tests pass a ByteSource */
  random?: RandomSource;
  /** OLH / BLH public seed, unsigned 64-bit (default: 8 bytes of WebCrypto) */
  seed?: bigint;
  /** milliseconds since the epoch (default: now) */
  eventTime?: number;
  /** user group (default 0) */
  group?: number;
  /** pseudonymous client id, 1 to 64 bytes (tasks whose budget counts clients) */
  clientId?: Uint8Array;
}

/** The JSON form of a payload. */
export function reportJson(
  taskId: string,
  payload: Payload,
  eventTime: number,
  group = 0,
  clientId?: Uint8Array,
): ReportJson {
  if (!Number.isInteger(eventTime) || eventTime < 0 || eventTime >= MAX_EVENT_MS) {
    throw new Error("event_time must be integer milliseconds in [1970, 2200)");
  }
  if (clientId !== undefined && (clientId.length < 1 || clientId.length > 64)) {
    throw new Error("client_id must be 1 to 64 bytes");
  }
  return {
    task_id: taskId,
    schema_version: SCHEMA_VERSION,
    event_time: eventTime,
    group,
    value: payload.value ?? null,
    seed: payload.seed === undefined ? null : BigInt.asIntN(64, payload.seed).toString(),
    bits: payload.bits === undefined ? null : toBase64(payload.bits),
    items: payload.items ?? null,
    reals: null,
    client_id: clientId === undefined ? null : toBase64(clientId),
  };
}

type Json = Record<string, unknown>;

function obj(x: unknown, what: string): Json {
  if (typeof x !== "object" || x === null || Array.isArray(x)) throw new Error(`${what} must be a JSON object`);
  return x as Json;
}

/**
 * The oracle a task file asks for. A task with a `resolved` block (`python -m ldp.task --resolve`) is read
 * from it; otherwise from `mechanism`, `epsilon`, `domain_size` (+1 with `hide_participation`), `hash.g`,
 * `hash.family` and `params.k`. `auto` needs the resolved block (its choice is the Python release's).
 */
export function specFromTask(task: unknown): OracleSpec {
  const t = obj(task, "task");
  const epsilon = t.epsilon as number;
  const resolved = t.resolved === undefined || t.resolved === null ? undefined : obj(t.resolved, "resolved");
  if (resolved !== undefined) {
    const oracles = resolved.oracles;
    if (!Array.isArray(oracles) || oracles.length !== 1) throw new Error("resolved.oracles must hold one oracle");
    const o = obj(oracles[0], "resolved oracle");
    return {
      mechanism: o.mechanism as Mechanism,
      epsilon,
      domainSize: o.domain_size as number,
      g: o.g as number | undefined,
      k: o.k as number | undefined,
      family: o.family as string | undefined,
    };
  }
  const mechanism = t.mechanism as string;
  if (mechanism === "auto") throw new Error("mechanism auto: resolve the task first (python -m ldp.task --resolve)");
  if (!(MECHANISMS as readonly string[]).includes(mechanism)) {
    throw new Error(
      `mechanism ${JSON.stringify(mechanism)} is not supported by this client (${MECHANISMS.join(" ")}; memoized: MemoClient)`,
    );
  }
  const hash = t.hash === undefined || t.hash === null ? {} : obj(t.hash, "hash");
  const params = t.params === undefined || t.params === null ? {} : obj(t.params, "params");
  const d = (t.domain_size as number) + (t.hide_participation === true ? 1 : 0);
  return {
    mechanism: mechanism as Mechanism,
    epsilon,
    domainSize: d,
    g: (hash.g ?? undefined) as number | undefined,
    k: (params.k ?? undefined) as number | undefined,
    family: (hash.family ?? undefined) as string | undefined,
  };
}

/**
 * The event-time precision of a task collected through the shuffler (`anonymity.shuffled`, the default when
 * the section exists): `anonymity.time_precision_s` (default 3600) in milliseconds; null for other tasks.
 */
export function timePrecisionMs(task: unknown): number | null {
  const t = obj(task, "task");
  if (t.anonymity === undefined || t.anonymity === null) return null;
  const a = obj(t.anonymity, "anonymity");
  if (a.shuffled === false) return null;
  const p = a.time_precision_s ?? 3600;
  if (typeof p !== "number" || !Number.isInteger(p) || p < 1) throw new Error("anonymity.time_precision_s must be a positive integer");
  return p * 1000;
}

/** Encodes the values of one task. */
export class Client {
  readonly taskId: string;
  readonly params: WireParams;
  /** shuffled tasks: event times are rounded down to a multiple of this (ms); null: kept to the millisecond */
  readonly timePrecisionMs: number | null;
  private crypto: CryptoSource | undefined;

  /** `wire`: the task's client parameters ({@link applyWire}), whose thresholds the client then uses. */
  constructor(taskId: string, spec: OracleSpec, wire?: unknown, timePrecision: number | null = null) {
    if (typeof taskId !== "string" || taskId.length === 0) throw new Error("task_id must be a non-empty string");
    this.taskId = taskId;
    this.params = applyWire(wireParams(spec), wire, taskId);
    this.timePrecisionMs = timePrecision;
  }

  /** The client of a task file's JSON (see {@link specFromTask}); `wire`: its client parameters. */
  static fromTask(task: unknown, options: { wire?: unknown } = {}): Client {
    const t = obj(task, "task");
    const sv = t.schema_version ?? SCHEMA_VERSION;
    if (sv !== SCHEMA_VERSION) throw new Error(`schema_version ${String(sv)}: this client writes version ${SCHEMA_VERSION}`);
    return new Client(t.task_id as string, specFromTask(t), options.wire, timePrecisionMs(t));
  }

  private cryptoSource(): CryptoSource {
    this.crypto ??= new CryptoSource();
    return this.crypto;
  }

  /** The payload of one report (no envelope). */
  payload(value: number, random: RandomSource = this.cryptoSource(), seed?: bigint): Payload {
    const needsSeed = this.params.mechanism === "olh" || this.params.mechanism === "blh";
    if (!needsSeed && seed !== undefined) throw new Error(`${this.params.mechanism} takes no seed`);
    return encodePayload(this.params, value, random, needsSeed ? (seed ?? cryptoSeed()) : undefined);
  }

  /** One report of `value` in the JSON form. */
  encode(value: number, options: EncodeOptions = {}): ReportJson {
    const payload = this.payload(value, options.random ?? this.cryptoSource(), options.seed);
    let eventTime = options.eventTime ?? Date.now();
    if (this.timePrecisionMs !== null) eventTime -= eventTime % this.timePrecisionMs; // shuffled: no fine times
    return reportJson(this.taskId, payload, eventTime, options.group ?? 0, options.clientId);
  }
}
