/**
 * The client parameters of a task (`python -m wire.client TASK.json`, docs/wire_format.md section 5): the
 * Python release's parameters of the byte procedure, whose `T_*` thresholds a client reads instead of
 * recomputing them through its own `Math.exp` / `Math.log` (not correctly rounded in V8, so a recomputed
 * threshold can be one off).
 */

type Json = Record<string, unknown>;

/** Keys that name the structure of the procedure: the file's must equal the client's own. */
const STRUCTURE = ["mechanism", "d", "g", "k", "K", "m", "family"];
const TWO53 = 2 ** 53;

function obj(x: unknown, what: string): Json {
  if (typeof x !== "object" || x === null || Array.isArray(x)) throw new Error(`${what} must be a JSON object`);
  return x as Json;
}

/**
 * `computed` with its thresholds (`T_*`) replaced by those of `wire`: a client parameters document
 * (`{task_id, vectors_version, params}`) or its `params` object. The file must be this task's: the same
 * structure (`mechanism`, `d`, `g`, `k`, `K`, `m`, `family`), every threshold of `computed` present, an
 * integer in [1, 2**53] within one of the client's own value (the most a last-ulp difference of `exp`
 * moves it), null exactly where the client's is null.
 */
export function applyWire<P extends object>(computed: P, wire: unknown, taskId: string): P {
  if (wire === undefined || wire === null) return computed;
  const doc = obj(wire, "client parameters");
  const params = doc.params === undefined ? doc : obj(doc.params, "client parameters' params");
  if (doc.task_id !== undefined && doc.task_id !== taskId) {
    throw new Error(`client parameters are for task ${JSON.stringify(doc.task_id)}, not ${JSON.stringify(taskId)}`);
  }
  const own = computed as unknown as Json;
  for (const key of STRUCTURE) {
    if (key in own && key in params && params[key] !== own[key]) {
      throw new Error(`client parameters: ${key} = ${JSON.stringify(params[key])}, the task gives ${JSON.stringify(own[key])}`);
    }
  }
  const out: Json = { ...own };
  for (const [key, mine] of Object.entries(own)) {
    if (!key.startsWith("T_")) continue;
    if (!(key in params)) throw new Error(`client parameters lack ${key}`);
    const given = params[key];
    if (mine === null || mine === undefined || given === null) {
      if ((mine ?? null) !== given) throw new Error(`client parameters: ${key} = ${String(given)}, the task gives ${String(mine)}`);
      continue;
    }
    if (typeof given !== "number" || !Number.isInteger(given) || given < 1 || given > TWO53) {
      throw new Error(`client parameters: ${key} must be an integer in [1, 2**53], got ${String(given)}`);
    }
    if (Math.abs(given - (mine as number)) > 1) {
      throw new Error(`client parameters: ${key} = ${given} is not this task's (computed ${String(mine)})`);
    }
    out[key] = given;
  }
  return out as unknown as P;
}
