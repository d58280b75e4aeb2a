/**
 * The gf2-affine hash family (docs/wire_format.md, section 2): the public 64-bit seed expands into
 * SplitMix64 words `w_j = splitmix64(seed + (j + 1) * GOLDEN)`; rows `w_j & (2**m - 1)` for `j < k`,
 * offset `w_k & (2**k - 1)`; bit `j` of `h(v)` is the parity of `row_j & v`, XOR the offset.
 */

const MASK64 = (1n << 64n) - 1n;
export const GOLDEN = 0x9e3779b97f4a7c15n;
const M1 = 0xbf58476d1ce4e5b9n;
const M2 = 0x94d049bb133111ebn;

/** The SplitMix64 finaliser on an unsigned 64-bit BigInt (wrapping arithmetic). */
export function splitmix64(x: bigint): bigint {
  let z = x & MASK64;
  z ^= z >> 30n;
  z = (z * M1) & MASK64;
  z ^= z >> 27n;
  z = (z * M2) & MASK64;
  z ^= z >> 31n;
  return z;
}

/** Word `j` (from 0) of a seed's expansion. */
export function seedWord(seed: bigint, j: number): bigint {
  return splitmix64(seed + BigInt(j + 1) * GOLDEN);
}

function parity(x: bigint): number {
  let p = 0;
  while (x > 0n) {
    const low = Number(x & 0xffffffffn);
    let v = low ^ (low >>> 16);
    v ^= v >>> 8;
    v ^= v >>> 4;
    v ^= v >>> 2;
    v ^= v >>> 1;
    p ^= v & 1;
    x >>= 32n;
  }
  return p;
}

/**
 * `h_seed(value)` of the gf2-affine family onto `2**k` buckets, for values of `m` bits (BigInt
 * reference form of {@link gf2Hash}, any `m, k <= 63`).
 * @param seed unsigned 64-bit seed
 */
export function gf2HashBig(seed: bigint, value: number, m: number, k: number): bigint {
  const s = seed & MASK64;
  const v = BigInt(value);
  const rowMask = (1n << BigInt(m)) - 1n;
  let h = 0n;
  for (let j = 0; j < k; j++) {
    h |= BigInt(parity(seedWord(s, j) & rowMask & v)) << BigInt(j);
  }
  return h ^ (seedWord(s, k) & ((1n << BigInt(k)) - 1n));
}

// -- the same function in 32-bit halves (what encoders call: BigInt arithmetic is ~20x slower) ------------
const STEP_HI: number[] = [];
const STEP_LO: number[] = [];

function step(j: number): void {
  while (STEP_HI.length <= j) {
    const c = (BigInt(STEP_HI.length + 1) * GOLDEN) & MASK64;
    STEP_HI.push(Number(c >> 32n));
    STEP_LO.push(Number(c & 0xffffffffn));
  }
}

const M1_HI = Number(M1 >> 32n);
const M1_LO = Number(M1 & 0xffffffffn);
const M2_HI = Number(M2 >> 32n);
const M2_LO = Number(M2 & 0xffffffffn);

/** `(ah, al) * (bh, bl) mod 2**64` into `out` as unsigned halves. */
function mul64(ah: number, al: number, bh: number, bl: number, out: number[]): void {
  const a0 = al & 0xffff;
  const a1 = al >>> 16;
  const b0 = bl & 0xffff;
  const b1 = bl >>> 16;
  const p00 = a0 * b0;
  const p01 = a0 * b1;
  const p10 = a1 * b0;
  const mid = (p00 >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
  out[1] = (((mid & 0xffff) << 16) | (p00 & 0xffff)) >>> 0;
  const carry = a1 * b1 + Math.floor(p01 / 65536) + Math.floor(p10 / 65536) + Math.floor(mid / 65536);
  out[0] = (carry + Math.imul(al, bh) + Math.imul(ah, bl)) >>> 0;
}

const TMP = [0, 0];

/** Word `j` of a seed's expansion as `[hi, lo]` (seed given as unsigned halves). */
function seedWord32(sHi: number, sLo: number, j: number, out: number[]): void {
  step(j);
  let lo = sLo + STEP_LO[j];
  let hi = sHi + STEP_HI[j] + (lo >= 2 ** 32 ? 1 : 0);
  lo >>>= 0;
  hi >>>= 0;
  // z ^= z >> 30; z *= M1; z ^= z >> 27; z *= M2; z ^= z >> 31
  lo = (lo ^ ((lo >>> 30) | (hi << 2))) >>> 0;
  hi = (hi ^ (hi >>> 30)) >>> 0;
  mul64(hi, lo, M1_HI, M1_LO, TMP);
  [hi, lo] = TMP;
  lo = (lo ^ ((lo >>> 27) | (hi << 5))) >>> 0;
  hi = (hi ^ (hi >>> 27)) >>> 0;
  mul64(hi, lo, M2_HI, M2_LO, TMP);
  [hi, lo] = TMP;
  lo = (lo ^ ((lo >>> 31) | (hi << 1))) >>> 0;
  hi = (hi ^ (hi >>> 31)) >>> 0;
  out[0] = hi;
  out[1] = lo;
}

function parity32(x: number): number {
  let v = x ^ (x >>> 16);
  v ^= v >>> 8;
  v ^= v >>> 4;
  v ^= v >>> 2;
  v ^= v >>> 1;
  return v & 1;
}

const WORD = [0, 0];

/**
 * `h_seed(value)` of the gf2-affine family onto `2**k` buckets, for values of `m` bits; `m, k <= 31`
 * (every domain a client encodes: the aggregator's accumulators cap d at 2**26).
 * @param seed unsigned 64-bit seed
 */
export function gf2Hash(seed: bigint, value: number, m: number, k: number): number {
  if (m > 31 || k > 31) return Number(gf2HashBig(seed, value, m, k));
  const s = seed & MASK64;
  const sHi = Number(s >> 32n);
  const sLo = Number(s & 0xffffffffn);
  const rowMask = m === 31 ? 0x7fffffff : (1 << m) - 1;
  let h = 0;
  for (let j = 0; j < k; j++) {
    seedWord32(sHi, sLo, j, WORD);
    h |= parity32(WORD[1] & rowMask & value) << j;
  }
  seedWord32(sHi, sLo, k, WORD);
  return (h ^ (WORD[1] & ((1 << k) - 1))) >>> 0;
}
