"""``python -m ldp.task --schema`` prints the task file's JSON Schema (``schemas/task.schema.json``);
``python -m ldp.task --resolve TASK.json`` prints the task with its resolution recorded."""

from __future__ import annotations

import json
import sys

from ldp.task import TaskError, load_task, resolve_task, task_json_schema


def main(args: list[str]) -> int:
    if args == ["--schema"]:
        print(json.dumps(task_json_schema(), indent=2))
        return 0
    if len(args) == 2 and args[0] == "--resolve":
        try:
            print(json.dumps(resolve_task(load_task(args[1])), indent=2))
        except TaskError as exc:
            print(f"error: {exc.one_line()}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m ldp.task --schema | --resolve TASK.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
