from train.claims import main

main()
