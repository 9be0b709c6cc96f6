module example.com/fixture

go 1.26
