"""What alerts turned out to be: analysts' dispositions, imported fraud labels, and each rule's accuracy from them."""
