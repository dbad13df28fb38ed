import sys


def total(path: str) -> float:
    with open(path) as fh:
        next(fh)
        return sum(float(line.rstrip("\n").split(",")[1]) for line in fh)


if __name__ == "__main__":
    print(f"{total(sys.argv[1]):.2f}")
