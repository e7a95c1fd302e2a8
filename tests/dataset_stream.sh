#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# dataset_stream.sh BINDIR: castor train reads its data files as streams:
# a FIFO as --x (what `--x <(zcat x.gz)` gives a shell user), plain bytes
# or gzip, works like a file; and a damaged gzip file is refused through
# the CLI with its exact message. Exit 77 (skipped) without gzip or mkfifo.
bin=$1
command -v gzip >/dev/null 2>&1 && command -v mkfifo >/dev/null 2>&1 || { echo "no gzip or mkfifo: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0
printf 'model tiny\nx = input(shape=[4])\np = dense(x, units=3, activation=softmax, name=p)\noutput p\n' > tiny.cast
# IDX: 8 images of 2x2 uint8, 8 labels in [0, 3)
printf '\000\000\010\003\000\000\000\010\000\000\000\002\000\000\000\002' > x.idx
printf '\000\100\200\377\011\022\033\044\055\066\077\110\121\132\143\154\165\176\207\220\231\242\253\264\275\306\317\330\341\352\363\374' >> x.idx
printf '\000\000\010\001\000\000\000\010\000\001\002\000\001\002\000\001' > y.idx
gzip -c x.idx > x.idx.gz
want="castor: 8 samples: X (8, 2, 2) uint8 IDX -> 4 float32 features, scaled by 1/255; Y uint8 IDX -> class indices"
wantgz="castor: 8 samples: X (8, 2, 2) uint8 IDX (gzip) -> 4 float32 features, scaled by 1/255; Y uint8 IDX -> class indices"
check() { # NAME EXPECTED-EXIT EXPECTED-LINE: runs "$bin/castor" train with the rest of "$@"
  name=$1 code=$2 line=$3; shift 3
  "$bin/castor" train tiny.cast "$@" --epochs 1 --batch-size 4 > out.txt 2> err.txt
  rc=$?
  if [ "$rc" != "$code" ] || ! grep -qxF "$line" err.txt; then
    echo "FAIL: $name: exit $rc (want $code); stderr:"; cat err.txt; echo "want the line: $line"; fail=$((fail+1))
  else
    echo "ok: $name"
  fi
}
# a FIFO fed by zcat: was "x.fifo: error: cannot read: Illegal seek"
mkfifo x.fifo
gzip -dc x.idx.gz > x.fifo &
check "FIFO from zcat" 0 "$want" --x x.fifo --y y.idx
wait
# a FIFO carrying the gzip bytes themselves
cat x.idx.gz > x.fifo &
check "FIFO of gzip bytes" 0 "$wantgz" --x x.fifo --y y.idx
wait
# concatenated members, as pigz and bgzip write: one stream
head -c 20 x.idx | gzip -c > cat.gz
tail -c +21 x.idx | gzip -c >> cat.gz
check "concatenated gzip members" 0 "$wantgz" --x cat.gz --y y.idx
# bytes after the last member
cp x.idx.gz junk.gz && printf 'junk' >> junk.gz
size=$(wc -c < x.idx.gz | tr -d ' ')
check "junk after the last member" 1 "junk.gz: error: corrupt gzip data: the bytes after the last gzip member (from byte $size) are not a gzip member" --x junk.gz --y y.idx
[ "$fail" = 0 ]
