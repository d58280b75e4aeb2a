/**
 * The frequency oracles' client side (docs/wire_format.md, section 3): parameters from (mechanism,
 * epsilon, domain size) exactly as ldp/oracles.py computes them, and the byte-level encoders.
 */

import { gf2Hash } from "./hash.js";
import { type RandomSource, bernoulli, bitLength, threshold, uniform } from "./random.js";

export const MECHANISMS = ["grr", "olh", "blh", "oue", "sue", "hr", "ss"] as const;
export type Mechanism = (typeof MECHANISMS)[number];

/** Smallest sampled probability (and `p - q`) the oracles accept, as in ldp.oracles. */
export const MIN_SAMPLED_PROBABILITY = 2 ** -32;
export const MAX_EPSILON = 100;
/** Largest domain (and bucket count) a client encodes: the aggregator's accumulators stay below 2**26 cells. */
export const MAX_DOMAIN = 2 ** 26;

/** What a client needs to build an oracle (a task's `resolved.oracles[i]` plus epsilon). */
export interface OracleSpec {
  mechanism: Mechanism;
  epsilon: number;
  domainSize: number;
  /** OLH buckets (default: the closed-form choice); BLH is 2 */
  g?: number;
  /** SS subset size (default: the lower-variance of floor / ceil of d / (e^eps + 1)) */
  k?: number;
  /** OLH / BLH hash family; only "gf2-affine" (and "linear-gf" with a power-of-two g, the same function) */
  family?: string;
}

/** The integers (and reference probabilities) of the wire procedure; the `params` of the vectors. */
export interface WireParams {
  mechanism: Mechanism;
  d: number;
  p: number;
  q: number;
  T_p: number;
  T_q?: number;
  g?: number;
  m?: number;
  k?: number;
  K?: number;
  family?: string;
}

function olhVarianceFactor(eps: number, g: number): number {
  const e = Math.exp(eps);
  return (e + g - 1) ** 2 / (Math.expm1(eps) ** 2 * (g - 1));
}

/** Default OLH buckets of the gf2-affine family (`ldp.oracles.olh_buckets`). */
export function olhBuckets(eps: number, d: number): number {
  const kmax = Math.min(63, bitLength(d) - 1);
  const t = eps / Math.LN2 + Math.log2(1 + Math.exp(-eps));
  const k0 = Math.floor(t);
  const cands = [...new Set([Math.min(kmax, Math.max(1, k0)), Math.min(kmax, Math.max(1, k0 + 1))])].sort(
    (a, b) => a - b,
  );
  let best = cands[0];
  for (const kk of cands.slice(1)) {
    if (olhVarianceFactor(eps, 2 ** kk) < olhVarianceFactor(eps, 2 ** best)) best = kk;
  }
  return 2 ** best;
}

function ssProbabilities(eps: number, d: number, k: number): [number, number, number] {
  const e = Math.exp(eps);
  const z = k * e + d - k;
  const p = (k * e) / z;
  const q = ((k * e * (k - 1)) / (d - 1) + ((d - k) * k) / (d - 1)) / z;
  const gap = (k * (d - k) * Math.expm1(eps)) / ((d - 1) * z);
  return [p, q, gap];
}

/** Default Subset Selection size (`ldp.oracles.SubsetSelection`). */
export function ssDefaultK(eps: number, d: number): number {
  const x = d / (Math.exp(eps) + 1);
  const cands = [
    ...new Set([Math.min(d - 1, Math.max(1, Math.floor(x))), Math.min(d - 1, Math.max(1, Math.ceil(x)))]),
  ].sort((a, b) => a - b);
  const factor = (k: number): number => {
    const [, q, gap] = ssProbabilities(eps, d, k);
    return (q * (1 - q)) / gap ** 2;
  };
  let best = cands[0];
  for (const k of cands.slice(1)) if (factor(k) < factor(best)) best = k;
  return best;
}

function checkInt(name: string, x: number, lo: number, hi: number): void {
  if (!Number.isInteger(x) || x < lo || x > hi) throw new Error(`${name} must be an integer in [${lo}, ${hi}], got ${x}`);
}

/** The wire parameters of an oracle; refuses what ldp.oracles refuses for these parameters. */
export function wireParams(spec: OracleSpec): WireParams {
  const { mechanism, epsilon: eps } = spec;
  const d = spec.domainSize;
  if (!(MECHANISMS as readonly string[]).includes(mechanism)) {
    throw new Error(`unknown mechanism ${JSON.stringify(mechanism)}; this client knows ${MECHANISMS.join(" ")}`);
  }
  if (typeof eps !== "number" || !Number.isFinite(eps) || eps <= 0 || eps > MAX_EPSILON) {
    throw new Error(`epsilon must be a number in (0, ${MAX_EPSILON}], got ${eps}`);
  }
  checkInt("domain_size", d, 2, MAX_DOMAIN);
  let p: number;
  let q: number;
  let gap: number;
  let sampled: number[];
  const out: Partial<WireParams> = { mechanism, d };
  switch (mechanism) {
    case "grr": {
      const e = Math.exp(eps);
      const z = e + d - 1;
      [p, q, gap] = [e / z, 1 / z, Math.expm1(eps) / z];
      sampled = [p];
      break;
    }
    case "olh":
    case "blh": {
      const family = spec.family ?? "gf2-affine";
      const g = mechanism === "blh" ? 2 : (spec.g ?? olhBuckets(eps, d));
      if (mechanism === "blh" && spec.g !== undefined && spec.g !== 2) throw new Error("blh has g = 2");
      checkInt("g", g, 2, 2 ** 53);
      const k = bitLength(g) - 1;
      if (2 ** k !== g) throw new Error(`g = ${g} is not a power of two; the gf2-affine family needs g = 2**k`);
      if (family !== "gf2-affine" && family !== "linear-gf") throw new Error(`unknown hash family ${family}`);
      const e = Math.exp(eps);
      const z = e + g - 1;
      [p, q, gap] = [e / z, 1 / g, (Math.expm1(eps) * (g - 1)) / (g * z)];
      sampled = [p];
      Object.assign(out, { g, family, m: Math.max(1, bitLength(d - 1)), k });
      break;
    }
    case "oue": {
      q = 1 / (Math.exp(eps) + 1);
      [p, gap] = [0.5, 0.5 * Math.tanh(eps / 2)];
      sampled = [p, q];
      break;
    }
    case "sue": {
      const e = Math.exp(eps / 2);
      [p, q, gap] = [e / (e + 1), 1 / (e + 1), Math.tanh(eps / 4)];
      sampled = [p, q];
      break;
    }
    case "hr": {
      const e = Math.exp(eps);
      [p, q, gap] = [e / (e + 1), 0.5, 0.5 * Math.tanh(eps / 2)];
      sampled = [p];
      out.K = 2 ** bitLength(d);
      break;
    }
    case "ss": {
      const k = spec.k ?? ssDefaultK(eps, d);
      checkInt("k", k, 1, d - 1);
      [p, q, gap] = ssProbabilities(eps, d, k);
      sampled = [p];
      out.k = k;
      break;
    }
  }
  const smallest = Math.min(...sampled.map((x) => Math.min(x, 1 - x)));
  if (smallest < MIN_SAMPLED_PROBABILITY) {
    throw new Error(`epsilon = ${eps} is too large for ${mechanism} on d = ${d}: a sampled probability is below 2**-32`);
  }
  if (gap < MIN_SAMPLED_PROBABILITY) {
    throw new Error(`epsilon = ${eps} is too small for ${mechanism} on d = ${d}: p - q is below 2**-32`);
  }
  out.p = p;
  out.q = q;
  out.T_p = threshold(p);
  if (mechanism === "oue" || mechanism === "sue") out.T_q = threshold(q);
  return out as WireParams;
}

/** A report's payload (the Reports fields a mechanism sets). */
export interface Payload {
  value?: number;
  seed?: bigint;
  bits?: Uint8Array;
  items?: number[];
}

function grr(v: number, size: number, t: number, src: RandomSource): number {
  if (bernoulli(src, t)) return v;
  const o = uniform(src, size - 1);
  return o + (o >= v ? 1 : 0);
}

function parity32(x: number): number {
  let v = x ^ (x >>> 16);
  v ^= v >>> 8;
  v ^= v >>> 4;
  v ^= v >>> 2;
  v ^= v >>> 1;
  return v & 1;
}

/**
 * Encodes one value from the random source (and, for OLH / BLH, the public seed).
 * The procedure of docs/wire_format.md, section 3; the same bytes give the same report as wire.vectors.
 */
export function encodePayload(params: WireParams, value: number, src: RandomSource, seed?: bigint): Payload {
  const d = params.d;
  checkInt("value", value, 0, d - 1);
  switch (params.mechanism) {
    case "grr":
      return { value: grr(value, d, params.T_p, src) };
    case "olh":
    case "blh": {
      if (seed === undefined) throw new Error(`${params.mechanism} needs a public seed`);
      const h = gf2Hash(seed, value, params.m!, params.k!);
      return { seed: BigInt.asUintN(64, seed), value: grr(h, params.g!, params.T_p, src) };
    }
    case "hr": {
      const want = bernoulli(src, params.T_p);
      const y = uniform(src, params.K!);
      const w = value + 1;
      const inSet = parity32(y & w) === 0;
      const low = w & -w;
      return { value: inSet !== want ? y ^ low : y };
    }
    case "oue":
    case "sue": {
      const bits = new Uint8Array((d + 7) >> 3);
      for (let i = 0; i < d; i++) {
        if (bernoulli(src, i === value ? params.T_p : params.T_q!)) bits[i >> 3] |= 1 << (i & 7);
      }
      return { bits };
    }
    case "ss": {
      const k = params.k!;
      const include = bernoulli(src, params.T_p);
      const c = include ? k - 1 : k;
      const n = d - 1;
      const taken = new Set<number>();
      for (let j = n - c; j < n; j++) {
        const t = uniform(src, j + 1);
        taken.add(taken.has(t) ? j : t);
      }
      const items = [...taken].map((x) => x + (x >= value ? 1 : 0));
      if (include) items.push(value);
      return { items: items.sort((a, b) => a - b) };
    }
  }
}
