/**
 * Random words for the wire procedure (docs/wire_format.md, section 3): a stream of 64-bit
 * little-endian words, read as two unsigned 32-bit halves, and the two primitives that consume it.
 */

/** One 64-bit word as its unsigned 32-bit halves: `lo + hi * 2**32`. */
export interface Word {
  lo: number;
  hi: number;
}

/** A source of 64-bit words. */
export interface RandomSource {
  nextWord(): Word;
}

const TWO32 = 2 ** 32;
const TWO53 = 2 ** 53;

function wordAt(bytes: Uint8Array, off: number): Word {
  const lo = (bytes[off] | (bytes[off + 1] << 8) | (bytes[off + 2] << 16) | (bytes[off + 3] << 24)) >>> 0;
  const hi =
    (bytes[off + 4] | (bytes[off + 5] << 8) | (bytes[off + 6] << 16) | (bytes[off + 7] << 24)) >>> 0;
  return { lo, hi };
}

/** Explicit random bytes (conformance vectors, tests): words in order; running out is an error. */
export class ByteSource implements RandomSource {
  private readonly bytes: Uint8Array;
  private offset = 0;

  constructor(bytes: Uint8Array) {
    this.bytes = bytes;
  }

  /** From a hex string (two digits a byte). */
  static fromHex(hex: string): ByteSource {
    if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) {
      throw new Error("random bytes must be an even-length hex string");
    }
    const out = new Uint8Array(hex.length / 2);
    for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
    return new ByteSource(out);
  }

  /** Bytes consumed so far (a multiple of 8). */
  get consumed(): number {
    return this.offset;
  }

  nextWord(): Word {
    if (this.offset + 8 > this.bytes.length) {
      throw new Error("random bytes exhausted");
    }
    const w = wordAt(this.bytes, this.offset);
    this.offset += 8;
    return w;
  }
}

/** Minimal view of WebCrypto's `getRandomValues` (globalThis.crypto in Node 20 and in browsers). */
interface RandomValues {
  getRandomValues<T extends ArrayBufferView>(array: T): T;
}

export function webCrypto(): RandomValues {
  const c = (globalThis as { crypto?: RandomValues }).crypto;
  if (c === undefined || typeof c.getRandomValues !== "function") {
    throw new Error("no WebCrypto: globalThis.crypto.getRandomValues is required (Node >= 20, browsers)");
  }
  return c;
}

/** Bytes from WebCrypto's cryptographic generator, fetched in blocks (what a real client uses). */
export class CryptoSource implements RandomSource {
  private readonly crypto: RandomValues;
  private readonly block: Uint8Array;
  private offset: number;

  /** @param blockBytes bytes fetched per call (a multiple of 8, at most 65536, the WebCrypto limit) */
  constructor(blockBytes = 4096) {
    if (blockBytes % 8 !== 0 || blockBytes < 8 || blockBytes > 65536) {
      throw new Error("blockBytes must be a multiple of 8 in [8, 65536]");
    }
    this.crypto = webCrypto();
    this.block = new Uint8Array(blockBytes);
    this.offset = blockBytes;
  }

  nextWord(): Word {
    if (this.offset >= this.block.length) {
      this.crypto.getRandomValues(this.block);
      this.offset = 0;
    }
    const w = wordAt(this.block, this.offset);
    this.block.fill(0, this.offset, this.offset + 8); // a served word is not kept
    this.offset += 8;
    return w;
  }
}

let seedSource: CryptoSource | undefined;

/**
 * A public 64-bit hash seed (OLH, BLH): 8 bytes of WebCrypto read little-endian, unsigned. Seeds come from
 * their own block of WebCrypto bytes, never from the words that drew a report's perturbation.
 */
export function cryptoSeed(): bigint {
  seedSource ??= new CryptoSource(4096);
  const w = seedSource.nextWord();
  return (BigInt(w.hi) << 32n) | BigInt(w.lo);
}

/** Bit length of a non-negative safe integer (0 for 0). */
export function bitLength(x: number): number {
  let n = 0;
  while (x >= 1) {
    x = Math.floor(x / 2);
    n++;
  }
  return n;
}

/**
 * An integer uniform on `[0, m)`, `1 <= m <= 2**53`: `m = 1` consumes nothing; otherwise a word is masked
 * to the bit length of `m - 1` and redrawn while the result is `>= m`.
 */
export function uniform(src: RandomSource, m: number): number {
  if (!Number.isInteger(m) || m < 1 || m > TWO53) throw new Error(`uniform needs 1 <= m <= 2**53, got ${m}`);
  if (m === 1) return 0;
  const bits = bitLength(m - 1);
  for (;;) {
    const w = src.nextWord();
    let x: number;
    if (bits <= 32) {
      x = bits === 32 ? w.lo : w.lo & ((1 << bits) - 1);
      x >>>= 0;
    } else {
      x = (w.hi & ((1 << (bits - 32)) - 1)) * TWO32 + w.lo;
    }
    if (x < m) return x;
  }
}

/** The top 53 bits of the next word, `w >> 11`, as an integer in `[0, 2**53)`. */
export function uniform53(src: RandomSource): number {
  const w = src.nextWord();
  return w.hi * 2 ** 21 + (w.lo >>> 11);
}

/** `(w >> 11) < T`: true with probability `T / 2**53`. */
export function bernoulli(src: RandomSource, threshold: number): boolean {
  return uniform53(src) < threshold;
}

/** `T = ceil(p * 2**53)`, the threshold of a Bernoulli(p) (exact: a power-of-two scaling of a double). */
export function threshold(p: number): number {
  if (!(p > 0 && p < 1)) throw new Error(`a sampled probability must lie in (0, 1), got ${p}`);
  return Math.ceil(p * TWO53);
}
