export { toBase64 } from "./base64.js";
export { Client, type EncodeOptions, type ReportJson, SCHEMA_VERSION, reportJson, specFromTask, timePrecisionMs } from "./client.js";
export { CollectorError, type PostAnswer, type PostOptions, newIdempotencyKey, postReports } from "./transport.js";
export { GOLDEN, gf2Hash, gf2HashBig, seedWord, splitmix64 } from "./hash.js";
export {
  MAX_DOMAIN,
  MECHANISMS,
  MIN_SAMPLED_PROBABILITY,
  type Mechanism,
  type OracleSpec,
  type Payload,
  type WireParams,
  encodePayload,
  olhBuckets,
  ssDefaultK,
  wireParams,
} from "./oracles.js";
export {
  ByteSource,
  CryptoSource,
  type RandomSource,
  type Word,
  bernoulli,
  bitLength,
  cryptoSeed,
  threshold,
  uniform,
  uniform53,
} from "./random.js";
export {
  DEFAULT_ALPHA,
  MEMO_MECHANISMS,
  MemoClient,
  type MemoEncodeOptions,
  type MemoMechanism,
  type MemoParams,
  type MemoSpec,
  PRF_DOMAIN,
  type Permanent,
  SECRET_BYTES,
  SECRET_STORAGE_KEY,
  type SecretStorage,
  fromHex,
  instantaneous,
  lhBuckets,
  loadOrCreateSecret,
  memoPayload,
  memoSpecFromTask,
  memoWireParams,
  newSecret,
  permanentResponse,
  prfMessage,
  prfWords,
} from "./memo.js";
export { hmacSha256, sha256 } from "./sha256.js";
export { applyWire } from "./wire.js";
export {
  HH_MECHANISMS,
  type HHMechanism,
  MAX_LENGTH_LIMIT,
  PemClient,
  type PemEncodeOptions,
  type PemLevel,
  type PemOutput,
  type PemParams,
  encodePem,
  pemHash,
  pemParams,
  publishedLevel,
  totalBits,
  valueBits,
  valueBytes,
} from "./heavy_hitters.js";
