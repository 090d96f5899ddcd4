"""``python -m companion.training`` (and ``torchrun ... -m companion.training``): see :mod:`companion.training.ddp`."""

from companion.training.ddp import main

if __name__ == "__main__":
    main()
