from train.claims import main

__all__ = []

main()
