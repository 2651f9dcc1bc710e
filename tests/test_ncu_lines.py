"""scripts/ncu_lines.py on a made-up kernel of six instructions: the per-function and per-line
counts come out of the ncu export and the local line table as they should."""

import gzip
import importlib.util
import os
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "ncu_lines.py")

SOURCE = '''def helper(x):
    return x + 1


def kernel(a):
    b = helper(a)
    return b
'''

# the kernel's section, then another kernel's (ignored: offsets restart there)
LINE_TABLE = '''//--------------------- .text.kernel --------------------------
	//## File "/somewhere/kern.py", line 6
        /*0000*/                   FADD R1, R2, R3 ;
	//## File "/somewhere/kern.py", line 2
        /*0010*/                   FFMA R1, R2, R3, R4 ;
        /*0020*/              @P0  FFMA R1, R2, R3, R4 ;
	//## File "/site-packages/triton/language/standard.py", line 263
        /*0030*/                   SHFL.BFLY PT, R1, R2, 0x1, 0x1f ;
	//## File "/somewhere/other_kern.py", line 6
        /*0040*/                   IMAD R1, R2, R3, R4 ;
	//## File "/somewhere/kern.py", line 5
        /*0050*/                   MOV R1, R2 ;
//--------------------- .text.other --------------------------
	//## File "/somewhere/kern.py", line 2
        /*0000*/                   BRA 0x0 ;
'''

HEADER = ['"Address"', '"Source"', '"Warp Stall Sampling (All Samples)"', '"Instructions Executed"',
          '"L1 Wavefronts Shared"']


def _csv(rows):
    lines = ['"Kernel Name","kernel",', ",".join(HEADER)]
    lines += [",".join(f'"{c}"' for c in r) for r in rows]
    return "\n".join(lines) + "\n"


def test_counts_by_function_and_line(tmp_path, capsys):
    (tmp_path / "kern.py").write_text(SOURCE)
    (tmp_path / "lines.txt").write_text(LINE_TABLE)
    base = 0x7F0000000000
    rows = [(hex(base + 0x00), "FADD R1, R2, R3", 10, 64, 0),   # kernel, line 6
            (hex(base + 0x10), "FFMA R1, R2, R3, R4", 30, 128, 0),  # helper, line 2
            (hex(base + 0x20), "@P0 FFMA R1, R2, R3, R4", 0, 64, 0),  # helper, line 2
            (hex(base + 0x30), "SHFL.BFLY PT, R1, R2, 0x1, 0x1f", 40, 64, 8),  # triton's library
            (hex(base + 0x40), "IMAD R1, R2, R3, R4", 10, 32, 0),  # another file whose name ends alike
            (hex(base + 0x50), "MOV R1, R2", 10, 32, 0)]  # on kernel's def line
    with gzip.open(tmp_path / "sass.csv.gz", "wt") as f:
        f.write(_csv(rows))
    spec = importlib.util.spec_from_file_location("ncu_lines", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv = sys.argv
    sys.argv = ["ncu_lines.py", str(tmp_path / "sass.csv.gz"), str(tmp_path / "lines.txt"), str(tmp_path / "kern.py"),
                "2", "4"]  # 2 programs, 4 warps a CTA: 8 warp-programs
    try:
        mod.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "6 SASS instructions, 0 whose opcode differs" in out
    assert "warp instructions a program: 192 (48 a warp)" in out  # 384 executed / 2 programs
    assert "| helper | 24 | 30.0% |" in out  # (128 + 64) / 8, 30 of 100 samples
    assert "| kernel | 12 | 20.0% |" in out  # lines 5 (its def line) and 6
    assert "| (other files) | 12 | 50.0% |" in out  # triton's standard.py and other_kern.py (not kern.py)
    assert "| somewhere/kern.py:2 | 24.0 | 30.0% | 0 | FFMA 24 | `return x + 1` |" in out
    assert "| language/standard.py:263 | 8.0 | 40.0% | 4 | SHFL 8 | `` |" in out  # 8 wavefronts / 2 programs
    assert "| somewhere/other_kern.py:6 | 4.0 | 10.0% | 0 | IMAD 4 | `` |" in out
