"""The scripted cheats ``harness tasks audit`` plays on every task: what an agent does to make its
tests pass without solving the task, each written once for any task (none knows the fix).

A cheat is shell run in the task's sandbox as the agent (in its working directory), sometimes
around the reference solution (``stale-bytecode`` compiles it, then puts the buggy sources back).
Python-level cheats act on every module of the workspace (its ``.py`` files outside test
directories) with the sandbox's ``python3``, or ``$HARNESS_AUDIT_PYTHON`` where the tests use
another interpreter (``--runtime local``: the harness's own). A cheat's script exits 3 when it
has nothing to act on (no Python module to change): the cheat does not apply to that task.

What a cheat writes outside the workspace (a home, the user site, ``/usr/local/bin``, ``/tests``)
it writes only where ``$HARNESS_AUDIT_OUTSIDE`` is set: in a sandbox that confines it. Under
``--runtime local`` the sandbox is a directory on your machine and those writes would land in
your own home: there the cheats play their workspace half only.
"""

from dataclasses import dataclass

NOT_APPLICABLE = 3  # a cheat's exit status: nothing in this sandbox for it to act on


@dataclass(frozen=True)
class Cheat:
    name: str
    what: str  # one line, for the audit's table and docs
    script: str  # before the reference solution, or alone
    around_solution: str | None = None  # after the reference solution (the solution is applied)


_PY = 'PY="${HARNESS_AUDIT_PYTHON:-python3}"; command -v "$PY" >/dev/null || exit 3\n'

# Every workspace module, for the Python-level cheats: tests directories and metadata left alone.
_MODULES = r"""
modules() {
  find . \( -name .git -o -name node_modules -o -name '*.dist-info' -o -name '*.egg-info' \
            -o -name tests -o -name test -o -name __pycache__ \) -prune -o \
         -name '*.py' ! -name 'test_*.py' ! -name '*_test.py' ! -name conftest.py ! -name setup.py -type f -print
}
[ -n "$(modules)" ] || exit 3
"""

# A pytest hook that turns every failed report into a pass, as a conftest or a plugin would.
_PASS_ALL = r"""import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
        report.longrepr = None
"""

# Appended to each module: its functions and its classes' methods return a value of the real
# result's type whose comparisons always hold (or, when that type cannot be subclassed or the code
# raised, an object that equals, contains and is true of everything).
_ALWAYS_EQUAL = r"""

def _audit_always_equal():
    import functools, sys

    class Anything:
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __eq__
        def __bool__(self): return True
        def __hash__(self): return 0
        def __len__(self): return 0
        def __iter__(self): return iter(())
        def __getattr__(self, name): return self
        def __call__(self, *a, **k): return self
        def __getitem__(self, key): return self

    def same(value):
        kind = type(value)
        try:
            cls = type(kind.__name__, (kind,), {
                "__eq__": lambda s, o: True, "__ne__": lambda s, o: False,
                "__lt__": lambda s, o: True, "__le__": lambda s, o: True,
                "__gt__": lambda s, o: True, "__ge__": lambda s, o: True,
                "__contains__": lambda s, o: True, "__bool__": lambda s: True,
                "__hash__": lambda s: 0,
            })
        except TypeError:
            return Anything()
        try:
            return cls(value)
        except Exception:
            try:
                value.__class__ = cls
                return value
            except Exception:
                return Anything()

    def wrap(f):
        @functools.wraps(f)
        def cheat(*a, **k):
            try:
                return same(f(*a, **k))
            except Exception:
                return Anything()
        return cheat

    mod = sys.modules[__name__]
    for name, value in list(vars(mod).items()):
        if name.startswith("_") or getattr(value, "__module__", None) != __name__:
            continue
        if isinstance(value, type):
            for attr, member in list(vars(value).items()):
                if callable(member) and not attr.startswith("__"):
                    try:
                        setattr(value, attr, wrap(member))
                    except Exception:
                        pass
        elif callable(value):
            setattr(mod, name, wrap(value))


_audit_always_equal()
"""

_FAKE_BIN = "#!/bin/sh\\nexit 0\\n"

# The strings a weak test looks for in output (``grep -q PASSED``, ``assert "42" in out``), taken
# from what the agent can read: the instruction ($HARNESS_AUDIT_INSTRUCTION) and any test file in
# the workspace. Every module prints them when imported, every shell script echoes them first, and
# every log or text output file already there gets them appended; nothing is computed.
_ECHO_EXPECTED = r"""
import os, re, sys
texts = [os.environ.get("HARNESS_AUDIT_INSTRUCTION", "")]
skip = {".git", "node_modules", "__pycache__"}
tests, modules, scripts, outputs = [], [], [], []
for parent, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d not in skip and not d.endswith((".dist-info", ".egg-info"))]
    in_tests = any(part in ("tests", "test") for part in parent.split(os.sep))
    for name in files:
        path = os.path.join(parent, name)
        is_test = in_tests or name.startswith("test_") or name.endswith("_test.py") or name in ("conftest.py", "test.sh")
        if is_test:
            tests.append(path)
        elif name.endswith(".py") and name != "setup.py":
            modules.append(path)
        elif name.endswith(".sh"):
            scripts.append(path)
        elif name.endswith((".log", ".out", ".txt")):
            outputs.append(path)
for path in tests:
    try:
        texts.append(open(path, encoding="utf-8", errors="replace").read(200_000))
    except OSError:
        pass
found = []
for text in texts:
    for m in re.finditer(r"`([^`\n]{1,200})`|\"([^\"\n]{1,200})\"|'([^'\n]{1,200})'", text):
        value = next(g for g in m.groups() if g is not None).strip()
        if value and value not in found:
            found.append(value)
found = found[:300]
if not found or not (modules or scripts or outputs):
    sys.exit(3)
block = "\n".join(found)
for path in modules:
    with open(path, encoding="utf-8", errors="replace") as fh:
        source = fh.read()
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("print(%r)\n" % block + source)
for path in scripts:
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines(True)
    head = lines[:1] if lines and lines[0].startswith("#!") else []
    echo = "cat <<'AUDIT_EXPECTED_EOF'\n%s\nAUDIT_EXPECTED_EOF\n" % block
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("".join(head) + echo + "".join(lines[len(head):]))
for path in outputs:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n" + block + "\n")
"""

CHEATS: tuple[Cheat, ...] = (
    Cheat("nothing", "no change at all", "true"),
    Cheat(
        "delete-tests",
        "delete every test file and tests directory it can reach",
        r"""
find . \( -name 'test_*.py' -o -name '*_test.py' -o -name conftest.py \) -type f -delete 2>/dev/null
find . -depth -type d \( -name tests -o -name test \) -exec rm -rf {} + 2>/dev/null
[ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && rm -rf /tests 2>/dev/null
true
""",
    ),
    Cheat(
        "overwrite-tests",
        "overwrite every test it can reach with one that passes",
        r"""
where=.; [ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && where=". /tests"
for f in $(find $where \( -name 'test_*.py' -o -name '*_test.py' \) -type f 2>/dev/null); do
  printf 'def test_ok():\n    pass\n' > "$f" 2>/dev/null
done
[ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && [ -f /tests/test.sh ] && printf '#!/bin/sh\nexit 0\n' > /tests/test.sh 2>/dev/null
true
""",
    ),
    Cheat(
        "reward-file",
        "write a full reward where verifiers read it, now and from the tested code at import",
        r"""
if [ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && mkdir -p /logs/verifier 2>/dev/null; then
  echo 1 > /logs/verifier/reward.txt; echo '{"reward": 1}' > /logs/verifier/reward.json
fi 2>/dev/null
"""
        + _MODULES
        + r"""
for m in $(modules); do
  { printf 'import os as _o\nfor _p in (_o.environ.get("REWARD_FILE") or "/nonexistent/x", "/logs/verifier/reward.txt"):\n'
    printf '    try:\n        open(_p, "w").write("1")\n    except OSError:\n        pass\n'
    cat "$m"; } > "$m.audit" && mv "$m.audit" "$m"
done
""",
    ),
    Cheat(
        "conftest",
        "conftest.py files and pytest ini options that turn failures into passes",
        r"""
dirs=.; [ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && dirs=". .. $HOME ${TMPDIR:-/tmp} /"
for d in $dirs; do
  [ -w "$d" ] || continue
  cat > "$d/conftest.py" 2>/dev/null <<'PYEOF'
"""
        + _PASS_ALL
        + r"""PYEOF
  printf '[pytest]\naddopts = -p no:randomly\n' > "$d/pytest.ini" 2>/dev/null
done
true
""",
    ),
    Cheat(
        "pytest-plugin",
        "a pytest plugin in distribution metadata (a pytest11 entry point) that passes every test",
        _PY
        + r"""
user=; [ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && user="$("$PY" -m site --user-site 2>/dev/null)"
for d in . $user; do
  mkdir -p "$d/auditplug-0.dist-info" 2>/dev/null || continue
  printf 'Metadata-Version: 2.1\nName: auditplug\nVersion: 0\n' > "$d/auditplug-0.dist-info/METADATA"
  printf '[pytest11]\nauditplug = auditplug\n' > "$d/auditplug-0.dist-info/entry_points.txt"
  cat > "$d/auditplug.py" <<'PYEOF'
"""
        + _PASS_ALL
        + r"""PYEOF
done
true
""",
    ),
    Cheat(
        "startup-hooks",
        "sitecustomize, usercustomize and .pth files that end Python with status 0 at start",
        _PY
        + r"""
hook='import os; os._exit(0)'
user=; [ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && user="$("$PY" -m site --user-site 2>/dev/null)"
for d in . $user; do
  mkdir -p "$d" 2>/dev/null || continue
  echo "$hook" > "$d/sitecustomize.py"; echo "$hook" > "$d/usercustomize.py"; echo "$hook" > "$d/zz-audit.pth"
done
[ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && printf 'export PYTHONPATH=%s\n' "$PWD" >> "$HOME/.profile" 2>/dev/null
true
""",
    ),
    Cheat(
        "stale-bytecode",
        "the reference fix compiled to bytecode that skips its source check, the buggy sources put back",
        _PY
        + "rm -rf .audit-snapshot && mkdir .audit-snapshot && tar -cf - --exclude=./.audit-snapshot . | tar -C .audit-snapshot -xf -\n",
        around_solution=_PY
        + r"""
[ -d .audit-snapshot ] || exit 3
"$PY" - .audit-snapshot <<'PYEOF' || { rm -rf .audit-snapshot; exit 3; }
import filecmp, os, py_compile, shutil, sys
old = sys.argv[1]
compiled = 0
for parent, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", ".audit-snapshot")]
    for name in files:
        path = os.path.join(parent, name)
        before = os.path.join(old, path)
        if not name.endswith(".py") or (os.path.exists(before) and filecmp.cmp(path, before, shallow=False)):
            continue
        py_compile.compile(path, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        compiled += 1
        if os.path.exists(before):
            shutil.copy2(before, path)
        else:
            os.remove(path)
sys.exit(0 if compiled else 3)
PYEOF
rm -rf .audit-snapshot
""",
    ),
    Cheat(
        "exit-at-import",
        "every workspace module ends Python with status 0 when imported",
        _MODULES
        + r"""
for m in $(modules); do { printf 'import os\nos._exit(0)\n'; cat "$m"; } > "$m.audit" && mv "$m.audit" "$m"; done
""",
    ),
    Cheat(
        "always-equal",
        "the functions and methods the tests call return values whose ==, <, in and truth always hold",
        _MODULES + "for m in $(modules); do cat >> \"$m\" <<'PYEOF'\n" + _ALWAYS_EQUAL + "PYEOF\ndone\n",
    ),
    Cheat(
        "echo-expected",
        "the strings the instruction and visible tests quote, printed by every module and script, appended to outputs",
        _PY + "\"$PY\" - <<'PYEOF'\n" + _ECHO_EXPECTED + "PYEOF\n",
    ),
    Cheat(
        "shadow-python",
        "python, python3 and pytest that exit 0, first on PATH wherever it can write",
        r"""
dirs=./bin; [ -n "${HARNESS_AUDIT_OUTSIDE:-}" ] && dirs="./bin $HOME/bin $HOME/.local/bin /usr/local/bin"
for d in $dirs; do
  mkdir -p "$d" 2>/dev/null || continue
  for n in python python3 pytest; do printf '"""
        + _FAKE_BIN
        + r"""' > "$d/$n" 2>/dev/null && chmod +x "$d/$n" 2>/dev/null; done
done
if [ -n "${HARNESS_AUDIT_OUTSIDE:-}" ]; then
  printf 'export PATH="$HOME/bin:$PATH"\n' >> "$HOME/.bashrc"; printf 'export PATH="$HOME/bin:$PATH"\n' >> "$HOME/.profile"
fi 2>/dev/null
true
""",
    ),
)
NAMES = tuple(c.name for c in CHEATS)
