from nca_interp.paper.claims import main

__all__ = []

main()
