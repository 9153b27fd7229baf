"""The docs point at things that exist: every ``docs/design.md §N`` names a
section of docs/design.md, nothing points at the first design brief (which
lived outside the repository), relative links in the Markdown docs resolve,
and the profiler reports quoted in docs/design.md §5 are what the profiler
prints."""

import re
import subprocess

from conftest import ROOT

from spirula.runtime import profiler

DESIGN_MD = ROOT / "docs" / "design.md"
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".comp",
    ".glsl",
    ".cu",
    ".cuh",
    ".h",
    ".sh",
    ".toml",
    ".txt",
    ".cfg",
    ".yaml",
    ".yml",
    ".json",
    "",
}
SKIP_DIRS = {".git", ".venv", "build", ".cache", "third_party", "__pycache__", "outputs", ".device"}
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", re.M)
REFERENCE = re.compile(r"design\.md,?\s+(?:§\s*|section\s+)(\d+(?:\.\d+)*)")
# spelled in two parts so that this file does not match itself
BRIEF = re.compile(r"\b" + "DES" + r"IGN\b")


def _text_files():
    """The repository's files (git's list where there is one), text only."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        paths = [ROOT / p for p in out.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in ROOT.rglob("*") if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)]
    for p in paths:
        rel = p.relative_to(ROOT)
        if p.is_file() and p.suffix in TEXT_SUFFIXES and not SKIP_DIRS.intersection(rel.parts):
            try:
                yield rel, p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue


def _sections() -> set:
    return set(HEADING.findall(DESIGN_MD.read_text(encoding="utf-8")))


def test_design_has_numbered_sections():
    sections = _sections()
    assert {str(k) for k in range(1, 13)} <= sections


def test_every_design_reference_names_a_section_that_exists():
    sections = _sections()
    bad = []
    for rel, text in _text_files():
        refs = REFERENCE.findall(text)
        if rel.as_posix() == "docs/design.md":
            refs += re.findall(r"§\s*(\d+(?:\.\d+)*)", text)  # its own cross-references
        bad += ["%s: §%s" % (rel, ref) for ref in refs if ref not in sections]
    assert not bad, "no such section in docs/design.md: " + ", ".join(bad)


def test_nothing_points_at_the_design_brief_outside_the_repository():
    bad = [
        "%s:%d" % (rel, text.count("\n", 0, m.start()) + 1) for rel, text in _text_files() for m in BRIEF.finditer(text)
    ]
    assert not bad, "point at docs/design.md §N instead: " + ", ".join(bad)


def test_relative_links_in_markdown_docs_resolve():
    bad = []
    for md in [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")):
        for target in re.findall(r"\]\(([^)\s]+)\)", md.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("#"):
                continue
            if not (md.parent / target.split("#")[0]).exists():
                bad.append("%s -> %s" % (md.relative_to(ROOT), target))
    assert not bad, bad


ARCHITECTURE_MD = ROOT / "docs" / "architecture.md"
# a line of the tree that names a file or folder: its indent, then the name (no spaces, no slash inside)
TREE_ENTRY = re.compile(r"^( *)([A-Za-z_][\w.]*(?:\.py|/))(?:\s|$)")


def _tree_paths() -> set:
    """The paths the tree of docs/architecture.md (its first fenced block) names
    under spirula/, as ``spirula/backends/vulkan/device.py``; folders end in /."""
    text = ARCHITECTURE_MD.read_text(encoding="utf-8")
    block = re.search(r"^```\n(spirula/\n.*?)^```", text, re.M | re.S)
    assert block, "docs/architecture.md: no tree starting with spirula/"
    paths, stack = set(), []  # stack: (indent, folder path) of the open folders
    for line in block.group(1).splitlines():
        m = TREE_ENTRY.match(line)
        if m is None:
            continue  # a description running on
        indent, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (stack[-1][1] if stack else "") + name
        paths.add(path)
        if name.endswith("/"):
            stack.append((indent, path))
    return {p for p in paths if p.startswith("spirula/")}


def test_the_architecture_tree_names_every_module_of_spirula():
    """Every module of spirula/ (a package's __init__.py may go unnamed) has its line
    in the tree of docs/architecture.md, and the tree names nothing that is not there."""
    named = _tree_paths()
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spirula").rglob("*.py")}
    folders = {p.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "spirula").rglob("*") if p.is_dir()}
    folders -= {f for f in folders if "__pycache__" in f}
    wanted = {f for f in files if not f.endswith("/__init__.py")} | {f for f in folders}
    missing = sorted(wanted - named)
    assert not missing, "not in docs/architecture.md's tree: %s" % missing
    stale = sorted(named - files - folders - {"spirula/"})
    assert not stale, "in docs/architecture.md's tree, not in spirula/: %s" % stale


def test_the_kernel_count_in_the_design_is_the_shaders():
    """docs/design.md §3.3 says how many kernels there are and lists each: one per shaders/*.comp."""
    text = DESIGN_MD.read_text(encoding="utf-8")
    start = text.index("### 3.3 The kernel list")
    section = text[start : text.index("\n## ", start)]
    shaders = sorted(p.stem for p in (ROOT / "shaders").glob("*.comp"))
    count = re.search(r"^(\d+) kernels\.", section, re.M)
    assert count and int(count.group(1)) == len(shaders), (count and count.group(0), len(shaders))
    assert sorted(re.findall(r"^\| `(\w+)` \|", section, re.M)) == shaders


def test_readme_and_architecture_link_the_design():
    assert "(docs/design.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(design.md)" in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


# The 30-step demo run on lavapipe quoted in docs/design.md §5, as the
# profiler's totals (ns, bytes): the report it prints must be the quoted text.
KERNELS = [
    ("rasterize_bwd", 30, 7767748649),
    ("rasterize_fwd", 36, 2448355140),
    ("loss_fwd", 30, 921326250),
    ("fpbo", 30, 831661051),
    ("loss_bwd", 30, 571591950),
    ("radix_sort_scatter", 212, 486543000),
    ("projection_fwd", 44, 160470860),
    ("radix_sort_count", 212, 139904000),
    ("copy", 206, 131753000),
    ("intersect_tile_write", 36, 98287020),
    ("fill", 174, 68262000),
    ("prefix_sum", 416, 61222000),
    ("tile_ranges", 36, 28785779),
    ("intersect_tile_count", 44, 21537000),
]
TRANSFERS = {
    "H2D": (36, 4724628, 623646000),
    "D2H": (50, 10368392, 49556000),
    "D2D": (120, 6840, 46969000),
    "memset": (174, 0, 558580000),
}
WAIT, GPU_EXEC, WALL_NS = (50, 13604106000), (1156, 13537433000), 18370114500
CATEGORIES = {
    "splat": (17, 4729078, 21474836),
    "splat x img": (19, 4225761, 4225761),
    "image": (10, 4687385, 4687385),
    "other": (10, 36457, 52429),
}
SCRATCH = 545260
LARGEST = [
    ("splat.sh", "splat", 1216348, 5756682),
    ("splat.adam_m.sh", "splat", 1216348, 5756682),
    ("splat.adam_v.sh", "splat", 1216348, 5756682),
    ("train.gt_images", "image", 3229614, 3229614),
    ("train.loss.ssim_grads", "image", 692060, 692060),
    ("splat.quats", "splat", 104858, 482345),
    ("splat.adam_m.quats", "splat", 104858, 482345),
    ("splat.adam_v.quats", "splat", 104858, 482345),
]


class _Pool:
    high_water = dict(categories=CATEGORIES, scratch=SCRATCH, largest=LARGEST)


def test_profiler_reports_quoted_in_the_design_are_what_the_profiler_prints():
    prof = profiler.Profiler()
    prof.t0, prof.clock = 0, lambda: WALL_NS
    for name, count, ns in KERNELS:
        row = prof.kernels[name]
        row.count, row.ns = count, ns
    for kind, (count, nbytes, ns) in TRANSFERS.items():
        prof.transfer(kind, nbytes, ns, count)
    (prof.wait.count, prof.wait.ns), (prof.gpu_exec.count, prof.gpu_exec.ns) = WAIT, GPU_EXEC
    prof.pools = [_Pool()]  # no devices: no "process (driver)" row, as on lavapipe
    text = DESIGN_MD.read_text(encoding="utf-8")
    start = text.index(profiler.PREFIX + " ---- GPU time by kernel ----")
    quoted = text[start : text.index("```", start)].rstrip("\n")
    assert quoted == prof.report()
