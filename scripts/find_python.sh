# Sourced by the stages that build fresh environments (newest_stack.sh, torch_stack.sh).
# find_python MAJOR MINOR [VARIABLE]: prints a python MAJOR.MINOR interpreter (the one the
# environment variable VARIABLE names first, then python on PATH, pyenv's, /usr's), or fails.
find_python() {
  local major=$1 minor=$2 candidate
  local named=${3:+${!3:-}}
  for candidate in "$named" "python$major.$minor" \
                   "$(pyenv root 2>/dev/null)"/versions/$major.$minor*/bin/python$major.$minor \
                   /usr/bin/python$major.$minor /usr/local/bin/python$major.$minor; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c "import sys; assert sys.version_info[:2] == ($major, $minor)" \
         >/dev/null 2>&1; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}
